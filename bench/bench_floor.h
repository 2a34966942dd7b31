#ifndef KCAGE_BENCH_FLOOR_H
#define KCAGE_BENCH_FLOOR_H

#include <stdbool.h>
#include <stdint.h>

#include "../measure/measure_kernel.h"
#include "kcage/measure.h"

/* The floor: kcage's timed round in this process, with nothing of the sandbox, the
 * ring or the stops: the inputs file's slots in one read-only mapping, data of its own
 * for every call, written into the slots before each piece (kc_round_write; a round
 * with more calls than slots runs in pieces of at most that many), one output region
 * per call poisoned before the round with stores of its own (as the worker's prepare
 * does) and, where kcage's parent would (kc_round_repoison), again before each piece,
 * and the clock read around each piece only,
 * calls made as measure_handler.c makes them.  kcage over the floor is what the sandbox
 * and its supervision cost; the floor over the harness is what the round's layout (the
 * integrity defences' outputs and inputs) costs by itself. */
typedef int (*floor_kernel_fn)(DLTensor *, int32_t);

typedef struct floor_round {
  kc_args_spec *spec;
  floor_kernel_fn fn;
  uint64_t in_region, out_region, number, piece;
  uint64_t n_out; /* output regions: number, or fewer that calls overwrite in turn */
  uint32_t n_slots;
  bool repoison;                   /* each piece's outputs poisoned again before it */
  unsigned char *in_w, *in, *area; /* the file writable; read-only; the output area */
  int in_fd;                       /* the inputs file (a memfd) */
  DLTensor t[KC_ARGS_MAX_TENSORS];
} floor_round;

/* spec parsed from args and the kernel of the .so at path (its "kernel" symbol); exits
 * with a line that names who when either cannot be had. */
floor_kernel_fn floor_kernel_open(const char *path, const char *args, kc_args_spec *spec,
                                  const char *who);

/* A round of `number` calls of fn over spec, its inputs in the slots `sets` sets give
 * (kc_round_input_slots), n_out output regions (0: one per call), pieces sized for calls
 * of per_call seconds as kcage sizes them; exits when out of memory. */
void floor_alloc(floor_round *f, kc_args_spec *spec, floor_kernel_fn fn, uint64_t number,
                 uint64_t n_out, double per_call, uint32_t sets);
void floor_free(floor_round *f);
/* Called before each piece's clock starts, after its inputs are written (NULL: nothing):
 * bench_accuracy's KC_ACCURACY_FLOOR_FORK=2 stops the floor's process there, as kcage
 * stops a worker. */
extern void (*floor_before_piece)(void);
/* Writes a piece's inputs in place of kc_round_write (NULL: kc_round_write here):
 * KC_ACCURACY_FLOOR_FORK=3 has the bench process write them, as kcage's parent does. */
extern void (*floor_write_piece)(const kc_round_layout *l, unsigned char *in_w, uint64_t c0,
                                 uint64_t cnt);

/* Runs a piece's calls in place of the floor's own loop and returns its seconds (NULL:
 * the floor's loop): KC_ACCURACY_FLOOR_FORK=4 runs them through the worker's handler
 * (kc_mstate_run), to tell its code path from the process around it. */
extern double (*floor_run_piece)(floor_round *f, uint64_t c0, uint64_t cnt);

/* One round, fresh data for every call (round seeds them); seconds per call. */
double floor_round_once(floor_round *f, uint64_t round);

#endif
