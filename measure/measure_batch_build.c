/* The builds of a batch: every source built once, in parallel helper processes, a
 * source identical to another taking its build. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* A build's message copied into the kernel's, behind a prefix, may lose its tail:
 * the record says enough without it. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "measure_batch.h"

/* Builds run in helper processes, one per --workers slot, forked (glibc fork) while
 * this process may have threads: each helper is single-threaded, so the sandbox's raw
 * clone3 never copies a lock some other thread held (it would deadlock the child
 * before exec).  Helpers are kcage's own code; they answer with the result struct. */

/* One build, its machinery failure (not the kernel's build error) as a failed result. */
static void build_one(const kc_build_opts *opts, const char *path, kc_build_result *res) {
  kc_error err = {0};
  if (kc_build_kernel(opts, path, res, &err) < 0) {
    memset(res, 0, sizeof *res);
    res->status = KC_BUILD_FAILED;
    snprintf(res->message, sizeof res->message, "%s", err.msg);
  }
}

static void build_helper(int fd, const item *items, size_t total, const kc_build_opts *opts) {
  for (;;) {
    uint32_t i;
    if (kc_io_all(fd, &i, sizeof i, false) < 0 || i >= total)
      _exit(0);
    kc_build_result res;
    build_one(opts, items[i].path, &res);
    if (kc_io_all(fd, &res, sizeof res, true) < 0)
      _exit(0);
  }
}

#define KC_MAX_BUILD_HELPERS 64

/* The builds of one batch: the sources to build (jobs, each an index into items) and
 * the helpers building them. */
typedef struct {
  const kc_measure_config *cfg;
  kc_build_opts build; /* cfg's, with the tenant's settings */
  item *items;
  size_t total;
  size_t *jobs, nj;  /* jobs[next..nj) are still to hand out */
  size_t next, done; /* handed out; answered */
  size_t nh, alive;  /* helpers started; helpers still reachable */
  struct {
    pid_t pid;
    int fd;
    long job; /* index into items, -1 when idle */
  } h[KC_MAX_BUILD_HELPERS];
} build_pool;

static bool needs_build(const item *it) {
  return it->is_source && it->dup_of < 0;
}

static void build_progress(const build_pool *b, size_t n) {
  if (b->cfg->progress)
    b->cfg->progress(b->cfg->progress_ctx, "build", n, b->nj);
}

/* Every source still unbuilt fails alike, with why. */
static void fail_unbuilt(item *items, size_t total, const char *why) {
  for (size_t i = 0; i < total; i++)
    if (needs_build(&items[i]) && !items[i].build_done) {
      items[i].build.status = KC_BUILD_FAILED;
      snprintf(items[i].build.message, sizeof items[i].build.message, "%s", why);
      items[i].build_done = true;
    }
}

static void start_helpers(build_pool *b) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  b->nh = b->cfg->workers ? b->cfg->workers : (size_t)(ncpu > 0 ? ncpu : 1);
  if (b->nh > b->nj)
    b->nh = b->nj;
  if (b->nh > KC_MAX_BUILD_HELPERS)
    b->nh = KC_MAX_BUILD_HELPERS;
  fflush(NULL); /* nothing buffered may be written twice */
  for (size_t k = 0; k < b->nh; k++) {
    int sv[2];
    b->h[k].pid = -1;
    b->h[k].fd = -1;
    b->h[k].job = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
      continue;
    pid_t pid = fork();
    if (pid == 0) {
      close(sv[0]);
      /* A Ctrl-C reaches the whole process group: the helper dies of it (and its
       * compiler's sandbox with it, by its death signal) instead of running on. */
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      build_helper(sv[1], b->items, b->total, &b->build);
      _exit(0);
    }
    close(sv[1]);
    if (pid < 0) {
      close(sv[0]);
      continue;
    }
    b->h[k].pid = pid;
    b->h[k].fd = sv[0];
    b->alive++;
  }
}

/* Without helpers (fork failed): build here, one after another. */
static void build_inline(build_pool *b) {
  for (; b->next < b->nj; b->next++) {
    item *it = &b->items[b->jobs[b->next]];
    build_one(&b->build, it->path, &it->build);
    it->build_done = true;
    build_progress(b, b->next + 1);
  }
}

static void drop_helper(build_pool *b, size_t k) {
  kc_close_fd(&b->h[k].fd);
  b->alive--;
}

/* Every idle helper gets the next job, or the end of the work. */
static void hand_out(build_pool *b) {
  for (size_t k = 0; k < b->nh; k++) {
    if (b->h[k].fd < 0 || b->h[k].job >= 0)
      continue;
    uint32_t idx = b->next < b->nj ? (uint32_t)b->jobs[b->next] : UINT32_MAX;
    if (b->next < b->nj)
      b->h[k].job = (long)b->jobs[b->next++];
    if (kc_io_all(b->h[k].fd, &idx, sizeof idx, true) < 0 || idx == UINT32_MAX) {
      if (b->h[k].job >= 0) { /* lost with its helper: try again elsewhere */
        b->jobs[--b->next] = (size_t)b->h[k].job;
        b->h[k].job = -1;
      }
      drop_helper(b, k);
    }
  }
}

static void collect(build_pool *b, size_t k) {
  item *it = &b->items[b->h[k].job];
  if (kc_io_all(b->h[k].fd, &it->build, sizeof it->build, false) < 0) {
    memset(&it->build, 0, sizeof it->build);
    it->build.status = KC_BUILD_FAILED;
    snprintf(it->build.message, sizeof it->build.message, "the build helper died");
    drop_helper(b, k);
  }
  it->build.message[sizeof it->build.message - 1] = 0;
  it->build.artifact[sizeof it->build.artifact - 1] = 0;
  it->build_done = true;
  b->h[k].job = -1;
  build_progress(b, ++b->done);
}

/* Hands out and collects until every job is answered, no helper is left, or Ctrl-C. */
static void run_helpers(build_pool *b) {
  for (;;) {
    hand_out(b);
    if (b->done == b->nj || !b->alive || kc_measure_interrupted())
      return;
    struct pollfd pfd[KC_MAX_BUILD_HELPERS];
    for (size_t k = 0; k < b->nh; k++)
      pfd[k] = (struct pollfd){b->h[k].fd >= 0 && b->h[k].job >= 0 ? b->h[k].fd : -1, POLLIN, 0};
    int pr = poll(pfd, (nfds_t)b->nh, 100); /* sliced: see kc_measure_interrupted */
    if (pr < 0 && errno != EINTR)
      return;
    for (size_t k = 0; pr > 0 && k < b->nh; k++)
      if (pfd[k].fd >= 0 && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
        collect(b, k);
  }
}

static void stop_helpers(build_pool *b) {
  for (size_t k = 0; k < b->nh; k++) {
    kc_close_fd(&b->h[k].fd);
    if (b->h[k].pid > 0 && kc_measure_interrupted())
      kill(b->h[k].pid, SIGKILL); /* its compiler dies with it (the sandbox's death signal) */
    if (b->h[k].pid > 0)
      waitpid(b->h[k].pid, NULL, 0);
  }
}

static void build_all(const kc_measure_config *cfg, item *items, size_t total) {
  build_pool b = {.cfg = cfg, .build = cfg->build, .items = items, .total = total};
  b.build.settings = cfg->settings;
  b.jobs = calloc(total + 1, sizeof *b.jobs);
  if (!b.jobs) { /* no memory for the plan: every build fails alike */
    fail_unbuilt(items, total, "out of memory");
    return;
  }
  for (size_t i = 0; i < total; i++)
    if (needs_build(&items[i]))
      b.jobs[b.nj++] = i;
  build_progress(&b, 0);
  start_helpers(&b);
  if (!b.alive)
    build_inline(&b);
  run_helpers(&b);
  stop_helpers(&b);
  fail_unbuilt(items, total, "no build helper could run"); /* when every helper died */
  free(b.jobs);
}

void kc_batch_build(const kc_measure_config *cfg, item *items, size_t total) {
  build_all(cfg, items, total);
  for (size_t i = 0; i < total; i++) {
    item *it = &items[i];
    if (it->dup_of < 0)
      continue;
    it->build = items[it->dup_of].build;
    it->build_done = true;
    if (it->build.status == KC_BUILD_OK) { /* compiled once, for the other copy */
      it->build.status = KC_BUILD_CACHED;
      it->build.build_s = 0;
    }
  }
}

bool kc_batch_build_verdict(item *it) {
  switch (it->build.status) {
  case KC_BUILD_OK:
  case KC_BUILD_CACHED:
    return true;
  case KC_BUILD_ERROR:
    it->status = KC_MEASURE_BUILD_ERROR;
    snprintf(it->message, sizeof it->message, "%s", it->build.message);
    return false;
  case KC_BUILD_TIMEOUT:
  case KC_BUILD_MEMORY:
    it->status = KC_MEASURE_BUILD_ERROR;
    snprintf(it->message, sizeof it->message, "%s", it->build.message);
    return false;
  default:
    it->status = KC_MEASURE_ERROR;
    snprintf(it->message, sizeof it->message, "build: %s", it->build.message);
    return false;
  }
}
