/* Private to a local batch (kc_measure_run_batch_ex): one kernel's bookkeeping, the
 * session the workers see, and the phases the driver (measure_batch.c) runs in turn:
 * the builds (measure_batch_build.c), the session and its limits
 * (measure_batch_session.c), the reference and the measuring (measure_batch_run.c), and
 * each kernel's record (measure_batch_record.c). */
#ifndef KCAGE_MEASURE_BATCH_H
#define KCAGE_MEASURE_BATCH_H

#include <limits.h>
#include <stdbool.h>
#include <time.h>

#include "measure_internal.h"
#include "measure_kernel.h"

/* ---- one kernel's bookkeeping ------------------------------------------------------- */
typedef struct item {
  const char *path;
  bool is_source;
  kc_build_result build; /* status, artifact, build_s, message */
  bool build_done;
  int dup_of; /* index of the item with identical source, or -1 */
  char *src;  /* contents (sources only) */
  size_t src_len;
  char staged[PATH_MAX]; /* the artifact's copy in the session dir */
  char sha256[65];       /* of the bytes built or staged; "" until known */
  kc_kmeasure m;
  bool measured;
  kc_measure_status status;
  char message[2048];
  struct timespec started, ended; /* wall clock, for the record */
  json_t *rec;                    /* once final */
} item;

/* The session directory holds every staged .so; a worker sees only view/, which holds
 * the inputs file and the one kernel being loaded (kernel.so), nothing else: not the
 * other candidates, not the reference (removed once it is loaded), not its outputs
 * (those never leave the parent's memory). */
typedef struct session {
  char dir[PATH_MAX];
  char view[PATH_MAX + 8];
  char inputs[PATH_MAX + 32];
  char in_dir[PATH_MAX];    /* the inputs file's own directory, or "" (kc_inputs_file) */
  char in_at[PATH_MAX + 8]; /* where workers see it */
  char kernel[PATH_MAX + 32];
  int in_fd;
  unsigned char *in_map; /* the parent's read-write mapping of the inputs file */
  size_t in_len;
  kc_args_spec spec;
  uint32_t n_sets;
  uint32_t n_slots;
  uint64_t out_region;
  uint64_t max_calls;
  uint64_t data_seed;
} session;

/* measure_batch_build.c: every source built once, in helper processes (a copy of
 * another takes its build); every item's build done or failed on return. */
void kc_batch_build(const kc_measure_config *cfg, item *items, size_t total);
/* Map a finished build onto the kernel's status; true when it can be measured. */
bool kc_batch_build_verdict(item *it);

/* measure_batch_session.c */
/* from copied to to; sha256 (when not NULL): the hash of the bytes copied. */
int kc_batch_copy_file(const char *from, const char *to, char *sha256, kc_error *err);
/* Refuses a problem whose smallest round cannot fit the measuring worker's memory
 * limit (s: spec, n_sets and out_region set). */
int kc_batch_check_fits(const kc_measure_config *cfg, const session *s, kc_error *err);
/* The session directory, its view and the inputs file, mapped (s: as for check_fits). */
int kc_batch_session_make(const kc_measure_config *cfg, session *s, kc_error *err);
/* Put one kernel alone into the view (replacing the previous one). */
int kc_batch_show_kernel(const session *s, const char *staged, kc_error *err);

/* measure_batch_run.c */
/* The reference, loaded and sealed in its own worker and tried once. */
int kc_batch_reference_load(const kc_measure_config *cfg, const session *s, kc_mrunner *r,
                            const char *staged, kc_error *err);
/* Every staged item measured, the reference first, each record made and handed out. */
int kc_batch_measure_all(const kc_measure_config *cfg, const session *s, kc_mrunner *runner,
                         kc_mrunner *ref, item *items, size_t n, size_t ref_index,
                         const char *device, const char *isolation, kc_error *err);

/* measure_batch_record.c */
/* "local:HOST CPU-MODEL", the record's device. */
void kc_batch_device_name(char *buf, size_t len);
/* The hash of a kernel's bytes, once known (a no-op after). */
void kc_batch_source_hash(item *it);
/* The kernel's final record. */
json_t *kc_batch_record(const kc_measure_config *cfg, const item *it, const char *device,
                        const char *isolation, double ref_median, const char *ref_sha);

#endif
