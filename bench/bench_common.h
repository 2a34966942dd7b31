/* Shared by the benchmark programs: statistics, and the results.json writer.  Every
 * figure is measured in the same run as what it is compared with. */
#ifndef KCAGE_BENCH_COMMON_H
#define KCAGE_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>

double kc_measure_now(void); /* CLOCK_MONOTONIC_RAW seconds */
/* Sorts v in place; q in [0,1]. */
double kc_measure_quantile(double *v, size_t n, double q);

/* Figures collected under one section name, then merged into
 * $KC_BENCH_DIR/results.json (default build/bench/results.json): results[section][key]. */
void kc_measure_set(const char *section, const char *key, double value);
void kc_measure_set_str(const char *section, const char *key, const char *value);
int kc_measure_write(void);

/* The CPUs this process may run on (its affinity at the first call), which trials take
 * in turn: a trial's harness and its kcage worker share one (--cpu), since this guest's
 * vCPUs differ in memory bandwidth from minute to minute.  bench_cpus fills cpus (at
 * most CPU_SETSIZE) and returns how many; bench_pin pins the calling thread to cpu
 * (-1: back to every CPU it had). */
int bench_cpus(int *cpus);
void bench_pin(int cpu);

/* bench_run's floor launchers (launch_floor.c): "ns" or "fs"; the exit status. */
int kc_measure_floor_launch(const char *what);

#endif
