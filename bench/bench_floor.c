/* The floor of a kcage round (bench_floor.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../measure/measure_internal.h"
#include "../measure/measure_kernel.h"
#include "bench_common.h"
#include "bench_floor.h"

void floor_alloc(floor_round *f, kc_args_spec *spec, floor_kernel_fn fn, uint64_t number,
                 uint64_t n_out, double per_call, uint32_t sets) {
  f->spec = spec;
  f->fn = fn;
  f->number = number;
  f->n_out = n_out && n_out < number ? n_out : number;
  f->in_region = kc_args_region_bytes(f->spec, false);
  f->out_region = kc_args_region_bytes(f->spec, true);
  f->n_slots = kc_round_input_slots(f->in_region, sets);
  f->n_slots = (uint32_t)(number < f->n_slots ? number : f->n_slots);
  const char *pb = getenv("KC_MEASURE_PIECE_BYTES"); /* as kcage reads it */
  uint64_t warm = f->n_out < number
                      ? number /* outputs reused: warm without pieces */
                      : kc_round_piece_calls(number, f->out_region, f->in_region, per_call,
                                             pb ? strtoull(pb, NULL, 0) : 0);
  f->piece = warm < f->n_slots ? warm : f->n_slots;
  f->repoison = kc_round_repoison(number, f->piece, warm, f->out_region); /* as measure.c */
  size_t in_len = (size_t)(f->in_region * f->n_slots);
  int fd = memfd_create("floor", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)in_len) < 0) {
    fprintf(stderr, "bench: floor inputs: out of memory\n");
    exit(1);
  }
  f->in_w = mmap(NULL, in_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  f->in = mmap(NULL, in_len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  f->area = mmap(NULL, f->n_out * f->out_region, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  bool ok = f->in_w != MAP_FAILED && f->in != MAP_FAILED && f->area != MAP_FAILED;
  f->in_fd = fd;
  if (!ok) {
    fprintf(stderr, "bench: floor: out of memory\n");
    exit(1);
  }
  for (uint32_t i = 0; i < f->spec->n; i++) {
    const kc_tensor_spec *ts = &f->spec->t[i];
    f->t[i] = (DLTensor){.data = ts->out ? NULL : f->in + kc_args_offset(f->spec, i),
                         .device = {kDLCPU, 0},
                         .ndim = ts->ndim,
                         .dtype = ts->dtype,
                         .shape = (int64_t *)ts->shape};
  }
}

void floor_free(floor_round *f) {
  close(f->in_fd);
  munmap(f->in_w, (size_t)(f->in_region * f->n_slots));
  munmap(f->in, (size_t)(f->in_region * f->n_slots));
  munmap(f->area, f->n_out * f->out_region);
}

/* KC_ACCURACY_FLOOR_POISON=vm: the floor poisons its outputs as kcage's parent poisons a
 * worker's (process_vm_writev, here into this process), not with stores of its own;
 * =vmread: and then reads them back through process_vm_readv (whether a read-back
 * would make such lines as ready for the kernel's stores as its own writes make them). */
static void floor_poison(floor_round *f, uint64_t c0, uint64_t cnt, uint64_t seed) {
  const char *how = getenv("KC_ACCURACY_FLOOR_POISON");
  bool vm = how && !strncmp(how, "vm", 2), readback = how && !strcmp(how, "vmread");
  for (uint64_t c = c0; c < c0 + cnt && c < f->n_out; c++) {
    kc_error err = {0};
    if (!vm)
      kc_poison_fill(f->area + c * f->out_region, f->out_region, kc_poison_word(seed, c));
    else if (kc_observe_poison(getpid(), (uint64_t)(uintptr_t)(f->area + c * f->out_region),
                               f->out_region, kc_poison_word(seed, c), &err) < 0) {
      fprintf(stderr, "bench: floor poison: %s\n", err.msg);
      exit(1);
    } else if (readback) { /* =vmread: then read back through process_vm_readv */
      static unsigned char scratch[64 << 10];
      for (uint64_t o = 0; o < f->out_region; o += sizeof scratch) {
        uint64_t n = f->out_region - o < sizeof scratch ? f->out_region - o : sizeof scratch;
        kc_observe_read(getpid(), (uint64_t)(uintptr_t)(f->area + c * f->out_region + o), scratch,
                        n, &err);
      }
    }
  }
}

/* Calls [c0, c0 + cnt) as the worker makes them (measure_handler.c); their seconds. */
static double floor_piece(floor_round *f, uint64_t c0, uint64_t cnt) {
  uint32_t n = f->spec->n, set = (uint32_t)(c0 % f->n_slots);
  static DLTensor args[KC_ARGS_MAX_TENSORS]; /* one array at one place, as there */
  double t0 = kc_measure_now();
  for (uint64_t c = c0; c < c0 + cnt; c++) {
    memcpy(args, f->t, n * sizeof *args);
    unsigned char *o = f->area + c % f->n_out * f->out_region;
    for (uint32_t t = 0; t < n; t++)
      args[t].data = f->spec->t[t].out ? o + kc_args_offset(f->spec, t)
                                       : (unsigned char *)args[t].data + set * f->in_region;
    f->fn(args, (int32_t)n);
    if (++set == f->n_slots)
      set = 0;
  }
  return kc_measure_now() - t0;
}

void (*floor_before_piece)(void);
double (*floor_run_piece)(floor_round *f, uint64_t c0, uint64_t cnt);
void (*floor_write_piece)(const kc_round_layout *l, unsigned char *in_w, uint64_t c0, uint64_t cnt);

double floor_round_once(floor_round *f, uint64_t round) {
  floor_poison(f, 0, f->number, round);
  kc_round_layout l = {.spec = f->spec,
                       .in_region = f->in_region,
                       .seed = 7,
                       .round = round,
                       .n_data = f->number,
                       .n_slots = f->n_slots,
                       .dup = f->number >= 2 ? f->number - 1 : UINT32_MAX};
  double total = 0;
  for (uint64_t c0 = 0; c0 < f->number; c0 += f->piece) {
    uint64_t cnt = f->number - c0 < f->piece ? f->number - c0 : f->piece;
    if (floor_write_piece)
      floor_write_piece(&l, f->in_w, c0, cnt);
    else
      kc_round_write(&l, f->in_w, c0, cnt, false);
    if (f->repoison)
      floor_poison(f, c0, cnt, round + 1000);
    if (floor_before_piece)
      floor_before_piece();
    total += floor_run_piece ? floor_run_piece(f, c0, cnt) : floor_piece(f, c0, cnt);
  }
  return total / (double)f->number;
}

floor_kernel_fn floor_kernel_open(const char *path, const char *args, kc_args_spec *spec,
                                  const char *who) {
  kc_error err = {0};
  if (kc_args_parse(args, spec, &err) < 0) {
    fprintf(stderr, "%s: %s\n", who, err.msg);
    exit(1);
  }
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  floor_kernel_fn fn = dl ? (floor_kernel_fn)(uintptr_t)dlsym(dl, "kernel") : NULL;
  if (!fn) {
    fprintf(stderr, "%s: %s: %s\n", who, path, dlerror());
    exit(1);
  }
  return fn;
}
