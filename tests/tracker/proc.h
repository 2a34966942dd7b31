/* Start the real kcage binaries for tests and stop them again. */
#ifndef KC_TRK_PROC_H
#define KC_TRK_PROC_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Run KCAGE_BIN with argv (NULL-terminated, argv[0] = subcommand); wait for its first
 * stdout line "... listening on HOST:PORT" and return the port (0 on failure). */
uint16_t proc_start(pid_t *pid, const char *const *argv);
void proc_kill(pid_t *pid); /* SIGKILL + reap; safe when *pid == 0 */
void proc_stop(pid_t *pid); /* SIGTERM, then SIGKILL after 2 s; reap */
uint16_t free_port(void);
/* Run KCAGE_BIN argv to completion (stdout to /dev/null); its exit status, -1 on timeout. */
int proc_run(const char *const *argv, double timeout_s);
/* Same, with stderr captured into err (NUL-terminated, truncated to len). */
int proc_run_err(const char *const *argv, double timeout_s, char *err, size_t len);
/* When nonzero, processes started afterwards get this RLIMIT_NOFILE. */
extern unsigned long proc_nofile;
#endif
