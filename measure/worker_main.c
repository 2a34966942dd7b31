/* kcage-worker: the worker program, with kcage bench's measure handler built in (a
 * sealed worker must not load the code that judges it from a path). */
#include "kcage/measure.h"
#include "kcage/worker.h"

/* In the sanitizer build, a worker's crash must stay a crash (the verdict names the
 * signal), not become ASan's report and exit(1); its own leaks are not checked (it is
 * always SIGKILLed). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0";
}

int main(int argc, char **argv) {
  static const kc_builtin builtins[] = {{"measure", kc_handler_measure}, {0}};
  return kc_worker_program_main(argc, argv, builtins);
}
