/* Handlers for the worker tests, loaded inside real workers as "lib.so:symbol".  Built
 * without sanitizers: they run inside the sandbox, and some are hostile on purpose. */
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kcage/worker.h"
#include "ring.h"

int raise_value_error(kc_call *c) {
  snprintf(c->error, c->error_cap, "ValueError: bad input %.*s", (int)c->arg_len,
           (const char *)c->arg);
  return 1;
}

int segfault(kc_call *c) {
  (void)c;
  volatile uintptr_t addr = 8; /* opaque to the compiler: a real fault */
  *(volatile int *)addr = 1;
  return 0;
}

int busy_loop(kc_call *c) {
  (void)c;
  for (volatile unsigned long i = 0;; i++)
    ;
  return 0;
}

int sleeper(kc_call *c) {
  (void)c;
  for (;;)
    sleep(100);
  return 0;
}

/* Touch memory until the cgroup's memory limit kills us. */
int hog_memory(kc_call *c) {
  (void)c;
  for (;;) {
    char *p = mmap(NULL, 16 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      continue;
    memset(p, 1, 16 << 20);
  }
  return 0;
}

/* Seal, then try to map executable memory: the seal filter kills the worker. */
int seal_then_exec_map(kc_call *c) {
  (void)c;
  if (kc_runtime_seal_exec() < 0) {
    snprintf(c->error, c->error_cap, "seal failed");
    return 1;
  }
  void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  (void)p;
  snprintf(c->error, c->error_cap, "mmap PROT_EXEC was allowed after seal");
  return 1;
}

static void *idle_thread(void *arg) {
  return arg;
}

/* Seal, then start a thread: glibc blocks signals around clone3, so a seal TRAP would
 * end the worker with no name; the base policy's kill rule must name the call. */
int seal_then_thread(kc_call *c) {
  if (kc_runtime_seal_exec() < 0) {
    snprintf(c->error, c->error_cap, "seal failed");
    return 1;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, idle_thread, NULL) == 0)
    pthread_join(t, NULL);
  snprintf(c->error, c->error_cap, "thread creation was allowed after seal");
  return 1;
}

/* Seal, then map a file (our own library) executable: measure allows that before the
 * seal, so this one is the seal filter's own rule. */
int seal_then_file_exec_map(kc_call *c) {
  Dl_info info;
  int fd = dladdr((void *)seal_then_file_exec_map, &info) ? open(info.dli_fname, O_RDONLY) : -1;
  if (fd < 0) {
    snprintf(c->error, c->error_cap, "cannot open our own library");
    return 1;
  }
  if (kc_runtime_seal_exec() < 0) {
    snprintf(c->error, c->error_cap, "seal failed");
    return 1;
  }
  void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
  (void)p;
  snprintf(c->error, c->error_cap, "file-backed mmap PROT_EXEC was allowed after seal");
  return 1;
}

/* Hostile: find the ring's control page (magic at a page start below our result slot)
 * and write garbage the parent must reject. */
static kc_ring_ctl *find_ctl(kc_call *c) {
  uintptr_t p = ((uintptr_t)c->out) & ~(uintptr_t)4095;
  for (int i = 0; i < 1 << 16; i++, p -= 4096)
    if (((kc_ring_ctl *)p)->magic == KC_RING_MAGIC)
      return (kc_ring_ctl *)p;
  return NULL;
}

int corrupt_tail(kc_call *c) {
  kc_ring_ctl *ctl = find_ctl(c);
  if (ctl)
    atomic_store(&ctl->cq_tail, (uint64_t)1 << 40);
  for (;;)
    pause();
  return 0;
}

int forge_completion(kc_call *c) {
  kc_ring_ctl *ctl = find_ctl(c);
  kc_cqe *h = (kc_cqe *)((char *)c->out - sizeof(kc_cqe));
  h->seq = c->seq;
  h->generation = c->generation ^ 0x5a5a;
  h->status = KC_CQE_COMPLETE;
  h->len = (uint64_t)1 << 50;
  if (ctl)
    atomic_store(&ctl->cq_tail, c->seq + 1);
  for (;;)
    pause();
  return 0;
}

/* Hostile: wake the parent's nap (ring.h) over and over, with nothing to take, and
 * scribble on the parent's sleep flag; then answer "ok". */
int spurious_wakes(kc_call *c) {
  kc_ring_ctl *ctl = find_ctl(c);
  if (!ctl)
    return 1;
  for (int i = 0; i < 20000; i++) {
    atomic_fetch_add(&ctl->cq_epoch, 1);
    atomic_store(&ctl->cq_waiters, (uint32_t)i);
    syscall(SYS_futex, &ctl->cq_epoch, FUTEX_WAKE, 1, NULL, NULL, 0);
    if (i % 64 == 0)
      usleep(10);
  }
  memcpy(c->out, "ok", 2);
  c->out_len = 2;
  return 0;
}

/* Hostile: claim to be dead (the death notice's FUTEX_OWNER_DIED) while alive, then
 * answer "ok" a while later. */
int forge_death(kc_call *c) {
  kc_ring_ctl *ctl = find_ctl(c);
  if (!ctl)
    return 1;
  atomic_store(&ctl->worker_tid, FUTEX_OWNER_DIED | 1u);
  usleep(20000);
  memcpy(c->out, "ok", 2);
  c->out_len = 2;
  return 0;
}

/* Hostile: withdraw the death notice (an empty robust list), then wait to be killed. */
int hide_death(kc_call *c) {
  (void)c;
  static struct robust_list_head empty = {.list = {&empty.list}};
  syscall(SYS_set_robust_list, &empty, sizeof empty);
  for (;;) /* not pause(): the measure policy forbids it */
    usleep(100000);
  return 0;
}

static int counter;
int count_calls(kc_call *c) {
  counter++;
  memcpy(c->out, &counter, sizeof counter);
  c->out_len = sizeof counter;
  return 0;
}

/* initializer: sets the counter from initargs ("fail" makes it raise) */
int init_counter(const void *a, size_t n, char *error, size_t cap) {
  if (n == 4 && !memcmp(a, "fail", 4)) {
    snprintf(error, cap, "RuntimeError: init refused");
    return 1;
  }
  if (n == sizeof counter)
    memcpy(&counter, a, sizeof counter);
  return 0;
}

static int echo_copy(kc_call *c) {
  memcpy(c->out, c->arg, c->arg_len);
  c->out_len = c->arg_len;
  return 0;
}

/* One handler, many outcomes (for pool maps): arg[0] picks what happens. */
int mixed(kc_call *c) {
  const char *a = c->arg;
  switch (c->arg_len ? a[0] : 'e') {
  case 'x':
    snprintf(c->error, c->error_cap, "KeyError: %.*s", (int)c->arg_len, a);
    return 1;
  case 'h':
    return busy_loop(c);
  case 's':
    return segfault(c);
  case 'n': { /* a syscall the measure policy forbids */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    snprintf(c->error, c->error_cap, "socket() returned %d", fd);
    return 1;
  }
  default:
    return echo_copy(c);
  }
}
