/* Kernels and measurement (docs/contracts.md): the `--args` language, the
 * deterministic inputs, output checking, the sandboxed build with its content-addressed
 * cache, and the batch entry point behind `kcage bench` (also called by the tracker's
 * device agent).
 *
 * A kernel exports `int kernel(DLTensor *args, int32_t num_args)` (symbol settable) and
 * returns 0 on success, or (KC_ABI_TVM_FFI) a function of TVM-FFI's packed C ABI, as a
 * module exported by TVM holds it.  Everything it writes is untrusted: the parent takes the time,
 * checks outputs against a reference computed in a different process, and accepts only
 * verdicts that make a kernel look worse, never better. */
#ifndef KCAGE_MEASURE_H
#define KCAGE_MEASURE_H

#include <dlpack/dlpack.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kcage/error.h"
#include "kcage/worker.h"

#include "kcage/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

KC_PUBLIC_BEGIN

/* ---------------------------------------------------------------------------------
 * `--args`: "f32[512,512] f32[512,512] f32[512,512]:out"
 * One tensor per word: dtype, shape in brackets ("f32[]" is a scalar), optional ":out"
 * (the kernel writes it; every other tensor is a read-only input).
 * dtypes: f32 f64 i32 i64 i8 u8 f16 bf16.
 * ------------------------------------------------------------------------------- */
#define KC_ARGS_MAX_TENSORS 16
#define KC_ARGS_MAX_NDIM 8
#define KC_ARGS_MAX_BYTES (1ull << 31) /* all tensors of one set together */

typedef struct kc_tensor_spec {
  DLDataType dtype;
  int32_t ndim;
  int64_t shape[KC_ARGS_MAX_NDIM];
  bool out;
  uint64_t numel;
  uint64_t nbytes;
  uint64_t offset; /* in its region: kc_args_offset */
} kc_tensor_spec;

typedef struct kc_args_spec {
  uint32_t n;
  kc_tensor_spec t[KC_ARGS_MAX_TENSORS];
  uint64_t in_bytes;  /* sum over inputs */
  uint64_t out_bytes; /* sum over outputs */
  uint64_t region[2]; /* [out]: kc_args_region_bytes */
} kc_args_spec;

int kc_args_parse(const char *text, kc_args_spec *out, kc_error *err);
/* Canonical text form ("f32[4,4] f32[4]:out"); returns bytes written like snprintf. */
int kc_args_format(const kc_args_spec *a, char *buf, size_t len);
/* "f32" etc.; "?" for a dtype outside the language. */
const char *kc_dtype_name(DLDataType t);
int kc_dtype_parse(const char *name, size_t len, DLDataType *out);
/* ---------------------------------------------------------------------------------
 * Build: `cc` inside a `build` sandbox, content-addressed cache.
 * ------------------------------------------------------------------------------- */

#define KC_BUILD_DEFAULT_CFLAGS "-O2 -march=native -fPIC -shared"

typedef struct kc_build_opts {
  const char *cc;        /* NULL = "cc" */
  const char *cflags;    /* NULL = "-O2 -march=native -fPIC -shared"; split on spaces */
  const char *cache_dir; /* NULL = $XDG_CACHE_HOME/kcage or ~/.cache/kcage */
  double timeout_s;      /* per build, wall; 0 = 60 */
  uint64_t memory_bytes; /* per build; 0 = 1 GiB */
  bool no_cache;         /* compile even when cached (result still stored) */
  kc_settings settings;  /* the tenant's: ids, cgroup mode, policy directory */
} kc_build_opts;

typedef enum kc_build_status {
  KC_BUILD_OK = 0,
  KC_BUILD_CACHED,  /* found in the cache */
  KC_BUILD_ERROR,   /* compiler said no: message holds its diagnostics */
  KC_BUILD_TIMEOUT, /* the compiler ran past its time limit */
  KC_BUILD_MEMORY,
  KC_BUILD_FAILED, /* infrastructure: could not run the compiler */
} kc_build_status;

typedef struct kc_build_result {
  kc_build_status status;
  char artifact[4096];    /* the cached .so (for OK/CACHED) */
  char key[65];           /* sha256 of compiler, flags, source */
  char source_sha256[65]; /* sha256 of the source bytes compiled (or found cached), hex */
  double build_s;         /* wall time of the compile (0 when cached) */
  char message[2048];     /* compiler output (trimmed) or the reason */
} kc_build_result;

/* Resolve defaults into *o (strings stay owned by the caller or are static). */
int kc_build_cache_dir(const kc_build_opts *o, char *buf, size_t len, kc_error *err);
/* The compiler a build would run (o->cc, else $CC, else cc, through PATH) into out
 * (at least PATH_MAX bytes); -1 with a one-line error when there is none. */
int kc_build_find_cc(const kc_build_opts *o, char *out, size_t len, kc_error *err);
/* Build one source file.  -1 only for errors of the caller's making (unreadable
 * source, cache dir not creatable); a compiler failure is a result. */
int kc_build_kernel(const kc_build_opts *o, const char *source, kc_build_result *res,
                    kc_error *err);

/* ---------------------------------------------------------------------------------
 * The batch (`kcage bench`).
 * ------------------------------------------------------------------------------- */
typedef enum kc_measure_status {
  KC_MEASURE_OK,
  KC_MEASURE_BUILD_ERROR,
  KC_MEASURE_WRONG_RESULT,
  KC_MEASURE_TIMEOUT,
  KC_MEASURE_MEMORY,
  KC_MEASURE_CRASH,
  KC_MEASURE_SYSCALL,
  KC_MEASURE_ERROR,
  KC_MEASURE_SUSPICIOUS,
} kc_measure_status;
const char *kc_measure_status_name(kc_measure_status s);
int kc_measure_status_parse(const char *name, kc_measure_status *out);

/* How a kernel is called. */
typedef enum kc_kernel_abi {
  KC_ABI_DLPACK = 0, /* int ENTRY(DLTensor *args, int32_t num_args) */
  /* int __tvm_ffi_ENTRY(void *self, const TVMFFIAny *args, int32_t num_args, TVMFFIAny
   * *result), each tensor a DLTensor pointer (type index kTVMFFIDLTensorPtr) */
  KC_ABI_TVM_FFI = 1,
} kc_kernel_abi;
const char *kc_abi_name(kc_kernel_abi a); /* "dlpack", "tvm-ffi" */
int kc_abi_parse(const char *name, kc_kernel_abi *out);
/* The entry a config without one means: "kernel" (dlpack), "main" (tvm-ffi: the
 * module's entry function). */
const char *kc_abi_default_entry(kc_kernel_abi a);

typedef struct kc_measure_config {
  const char *args;      /* the --args text (required) */
  uint64_t seed;         /* used only with seed_set */
  bool seed_set;         /* false: inputs from a secret seed (getrandom), per run */
  const char *reference; /* trusted kernel (.c or .so) or NULL */
  double rtol, atol;     /* negative (as init leaves them) = 1e-4, 1e-5 */
  kc_kernel_abi abi;     /* of every kernel and the reference alike */
  const char *entry;     /* NULL = kc_abi_default_entry(abi); tvm-ffi: the function's name */
  uint32_t number;       /* starting calls per round; 0 = 1 */
  uint32_t repeat;       /* rounds; 0 = 5 */
  double min_repeat_ms;  /* grow number until a round lasts this long; < 0 = 20 */
  double cooldown_ms;    /* sleep between rounds */
  bool flush_cache;      /* evict the tensors from the CPU caches before each round */
  uint32_t workers;      /* parallel builds (helper processes); 0 = online CPUs */
  double timeout_s;      /* one kernel call (a round of N calls gets N times it); 0 = 10 */
  uint64_t memory_bytes; /* per measuring worker; 0 = 1 GiB */
  uint32_t sets;         /* distinct input/output sets the timed calls rotate through; 0 = 4 */
  uint32_t checks;       /* timed calls verified per round (drawn after it); 0 = 2 */
  bool no_isolation;     /* run kernels in a plain process: no namespaces, no cgroup
                            (--no-isolation only; records say "isolation": "none") */
  kc_build_opts build;
  /* Remote runs: the caller sends the batch to kc_measure_remote_run (kcage/tracker.h)
   * when tracker is set; kc_measure_run_batch refuses a config with tracker set. */
  const char *tracker; /* "HOST:PORT" */
  const char *key;
  int priority;
  double session_timeout_s;
  /* TVM's session_constructor_args for the session (tracker.h), NULL/0 = none. */
  const char *const *session_constructor_args;
  size_t n_session_constructor_args;
  /* Progress after each step, from the calling thread. */
  void (*progress)(void *ctx, const char *phase, size_t done, size_t total);
  void *progress_ctx;
  /* The path of the kernel (or the reference) whose measurement starts, with
   * progress_ctx, from the calling thread; NULL for none. */
  void (*on_start)(void *ctx, const char *kernel);
  double budget_s; /* one kernel's whole measurement; 0 = 300, negative = none */
  double max_cv;   /* a record is "unstable" above this CV; 0 = 0.1, negative = never */
  /* Each kernel's record as soon as it is final (the reference's first, then the
   * kernels in input order), from the calling thread; the record stays the batch's. */
  void (*on_record)(void *ctx, const json_t *record);
  void *record_ctx;
  /* Where timed rounds are cut into pieces, each poisoned from outside right before it
   * (each call then writes memory as warm as a harness that poisons its output before
   * each call): non-zero, pieces of as many calls as touch (inputs and outputs) at most
   * this many bytes.  0 = only calls of a millisecond or more whose output fits half of
   * L2 go in pieces, by that half; other rounds run whole. */
  uint64_t piece_bytes;
  /* --cpu: each measuring worker (the reference's too) runs its rounds on this CPU
   * alone, and the parent waits there asleep while a round runs (its completion wakes
   * the parent on that CPU); without pin_cpu it runs wherever the scheduler puts it.  It
   * must be one of the CPUs the caller may use. */
  bool pin_cpu;
  uint32_t cpu;
  /* The tenant's cgroup mode, limits fallback, id range and policy directory, for the
   * builds and the measuring workers alike (build.settings is replaced by it). */
  kc_settings settings;
} kc_measure_config;

void kc_measure_config_init(kc_measure_config *c);

/* Run the batch.  *records: a JSON array with one object per kernel, in input order,
 * with the fields of docs/contracts.md (kernel, status, message, run_secs, median_s,
 * min_s, cv, number, repeat, max_abs_err, build_s, device, limits), then mean_s,
 * stddev_s, max_s, warmup_secs, unstable, timeout ("call"/"budget"), reference_median_s,
 * speedup, seed (or "secret"), checked_calls, isolation, abi, cc, cflags, kcage_version,
 * started_at, ended_at (README.md).  Returns 0 when
 * the batch ran, whatever the kernels did; -1 with err for bad input (bad --args, a
 * missing file, a reference that does not work with --args) or a setup failure. */
int kc_measure_run_batch(const kc_measure_config *cfg, const char *const *kernels, size_t n,
                         json_t **records, kc_error *err);

/* Same, plus the reference's own record (its timing, for speed-ups; NULL without
 * --reference) in *reference_record when that is not NULL. */
int kc_measure_run_batch_ex(const kc_measure_config *cfg, const char *const *kernels, size_t n,
                            json_t **records, json_t **reference_record, kc_error *err);

/* One record as one JSON Lines line (no newline; free() it): every number in its
 * shortest round-trip form, times rounded to 12 significant digits first. */
char *kc_measure_record_dumps(const json_t *record);
/* Stop the running batch (async-signal-safe: for SIGINT/SIGTERM handlers): the
 * measuring worker and every build are killed, kc_measure_run_batch returns -1 soon
 * (kc_measure_interrupted() then says so); records already delivered stay valid. */
void kc_measure_interrupt(int sig);
int kc_measure_interrupted(void); /* the signal number given, or 0 */

KC_PUBLIC_END

#ifdef __cplusplus
}
#endif
#endif
