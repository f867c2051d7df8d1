// What it costs to move one cache line between two CPUs: two threads, pinned to CPU A and
// CPU B, hand a counter back and forth (each waits for the other's increment, then makes
// its own), and the time per one-way move is printed. A spawn whose parent and child run
// on different CPUs moves every line that both touch, in the kernel and in forkprof's
// maps, at about this price each (docs/kernel-findings.md).
// Build: gcc -O2 -Wall -Wextra -pthread -o line_pingpong bench/line_pingpong.c
// Usage: line_pingpong [MOVES/2 (1000000)] [CPU A (0)] [CPU B (1)]; A and B must differ
// (on one CPU each thread would spin through the other's time slice).
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) _Atomic long turn;
static long rounds;

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    fprintf(stderr, "line_pingpong: cannot pin to CPU %d\n", cpu);
    exit(2);
  }
}

// Waits for the count `from`, then makes it `from + 1`, for every second count from
// `first` on.
static void play(long first) {
  for (long i = first; i < 2 * rounds; i += 2) {
    while (atomic_load_explicit(&turn, memory_order_acquire) != i)
      ;
    atomic_store_explicit(&turn, i + 1, memory_order_release);
  }
}

static void *other(void *cpu) {
  pin(*(int *)cpu);
  play(1);
  return NULL;
}

int main(int argc, char **argv) {
  rounds = argc > 1 ? atol(argv[1]) : 1000000;
  int a = argc > 2 ? atoi(argv[2]) : 0, b = argc > 3 ? atoi(argv[3]) : 1;
  if (rounds <= 0 || a == b) {
    fprintf(stderr, "usage: line_pingpong [MOVES/2] [CPU A] [CPU B], A != B\n");
    return 2;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, other, &b) != 0) {
    fprintf(stderr, "line_pingpong: cannot start a thread\n");
    return 2;
  }
  pin(a);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  play(0);
  while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * rounds)
    ;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  pthread_join(t, NULL);
  double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
  printf("CPUs %d and %d: %.1f ns per one-way move of a cache line\n", a, b, ns / (2.0 * rounds));
  return 0;
}
