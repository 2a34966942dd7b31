/* Where tensors lie, the inputs and poison, and the measure handler, for measure/ and its tests.
 * Not installed: it extends the public include/kcage/measure.h, which it includes first; in-tree
 * code that includes "kcage/measure.h" gets both (internal/ comes first on its include path). */
#ifndef KCAGE_INTERNAL_MEASURE_H
#define KCAGE_INTERNAL_MEASURE_H

#include_next <kcage/measure.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Byte offset of tensor i in its set's region: the inputs' region (in order) or the
 * outputs' (in order), each tensor aligned to 64 bytes, and large ones staggered so that
 * no two start at the same offset within a 2 MiB page (args.c).  The regions' sizes
 * below. */
uint64_t kc_args_offset(const kc_args_spec *a, uint32_t i);
uint64_t kc_args_region_bytes(const kc_args_spec *a, bool out);

/* ---------------------------------------------------------------------------------
 * Data: deterministic inputs, poison, comparison.
 * ------------------------------------------------------------------------------- */
uint64_t kc_splitmix64(uint64_t *state);
/* Fill tensor `t` of input set `set` from seed: floats uniform in [-1, 1), integers
 * small (so sums of products stay exact).  Same (seed, set, index) -> same bytes. */
void kc_data_fill(const kc_tensor_spec *t, void *buf, uint64_t seed, uint32_t set, uint32_t index);
/* The poison word of call `call` of a request seeded with `seed`: all-ones (NaN for
 * floats, -1 for integers) when (seed ^ call) is even, else a random 64-bit pattern. */
uint64_t kc_poison_word(uint64_t seed, uint64_t call);
void kc_poison_fill(void *buf, size_t len, uint64_t word);
bool kc_poison_equal(const void *buf, size_t len, uint64_t word); /* buf is all poison */

float kc_half_to_float(uint16_t h);
float kc_bf16_to_float(uint16_t h);
uint16_t kc_float_to_half(float f);
uint16_t kc_float_to_bf16(float f);

/* Compare one output tensor: every element must satisfy |got - want| <= atol + rtol *
 * |want| (NaN equals NaN, inf equals the same inf).  Returns true when it does; the
 * largest absolute error (inf when a NaN/inf disagrees) goes to *max_abs_err. */
bool kc_tensor_close(const kc_tensor_spec *t, const void *got, const void *want, double rtol,
                     double atol, double *max_abs_err);

/* Set reference_median_s and speedup (reference / median_s; null when either is
 * missing) on a record. */
void kc_measure_record_set_reference(json_t *record, double reference_median_s);

/* kcage bench's handler inside the sandboxed worker: the "measure" built-in of the
 * kcage-worker program (measure/worker_main.c). */
int kc_handler_measure(kc_call *call);

#ifdef __cplusplus
}
#endif
#endif
