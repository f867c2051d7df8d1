/* forkprof bench's spawn loop. Built twice by forkprof's build.rs (static and dynamic) and
 * embedded in forkprof, so `forkprof bench` needs no compiler where it runs.
 *
 *   driver METHOD ITERATIONS [PROGRAM ARGS...]
 *     METHOD: fork | vfork | posix_spawn. The child _exit(0)s, or execs PROGRAM.
 *     FP_RSS_MIB=N: touch N MiB (no transparent huge pages) before the loop.
 *     FP_RSS_HUGE=1: in transparent huge pages instead (MADV_HUGEPAGE, the mapping aligned to
 *       2 MiB), where the kernel gives them.
 *     FP_CPU=N: run on CPU N only, and so do the children, which inherit the affinity. Without
 *       it the scheduler may start each child on another CPU, and the cross-CPU wake-ups
 *       that follow can cost more than the spawn itself (tens of µs on a VM).
 *     FP_TURN=R,W: take turns with another driver: wait for a byte on fd R before each
 *       iteration and write one to fd W after it. Two drivers started with crossed pipes
 *       then alternate iteration by iteration, so a machine whose speed drifts slows both
 *       alike and the ratio of their times stays steady.
 *   One untimed warm-up iteration comes first (it takes its turn too).
 *   Prints "us_per_iter <float>", the mean of the iterations' times (CLOCK_MONOTONIC, from
 *   the spawn to the wait's return), and "us_per_iter_median <float>", their median. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s fork|vfork|posix_spawn ITERATIONS [PROGRAM ARGS...]\n", argv[0]);
        return 2;
    }
    const char *method = argv[1];
    long iterations = atol(argv[2]);
    if (iterations <= 0) {
        fprintf(stderr, "ITERATIONS must be positive\n");
        return 2;
    }
    char **prog = argc > 3 ? argv + 3 : NULL;
    const char *rss = getenv("FP_RSS_MIB");
    if (rss && atol(rss) > 0) {
        size_t len = (size_t)atol(rss) << 20, huge = 2 << 20;
        const char *want_huge = getenv("FP_RSS_HUGE");
        int hugepages = want_huge && strcmp(want_huge, "1") == 0;
        /* One huge page more, so that the touched range can start on a 2 MiB boundary. */
        char *p = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("mmap"); return 1; }
        if (hugepages) p = (char *)(((size_t)p + huge - 1) & ~(huge - 1));
        madvise(p, len, hugepages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        for (size_t i = 0; i < len; i += 4096) p[i] = 1;
    }
    const char *cpu = getenv("FP_CPU");
    if (cpu && *cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(atoi(cpu), &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) { perror("FP_CPU"); return 1; }
    }
    int turn_r = -1, turn_w = -1;
    const char *turn = getenv("FP_TURN");
    if (turn && sscanf(turn, "%d,%d", &turn_r, &turn_w) != 2) {
        fprintf(stderr, "FP_TURN must be R,W (two file descriptors)\n");
        return 2;
    }
    /* The other driver may be gone when this one passes the turn back for the last time. */
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(method, "posix_spawn") == 0 && !prog) {
        fprintf(stderr, "posix_spawn needs a PROGRAM\n");
        return 2;
    }
    double *times = malloc(sizeof(double) * (size_t)iterations);
    if (!times) { perror("malloc"); return 1; }
    double total = 0;
    char token = 0;
    /* i == -1 is a warm-up, not timed: the first fork after the memory was touched also
     * write-protects every page (later ones find them so), and the first exec of a binary
     * may read it from disk. */
    for (long i = -1; i < iterations; i++) {
        if (turn_r >= 0 && read(turn_r, &token, 1) != 1) {
            fprintf(stderr, "the other driver stopped taking turns\n");
            return 1;
        }
        double t0 = now_us();
        pid_t pid;
        if (strcmp(method, "posix_spawn") == 0) {
            if (posix_spawn(&pid, prog[0], NULL, NULL, prog, environ) != 0) { perror("posix_spawn"); return 1; }
        } else {
            pid = strcmp(method, "vfork") == 0 ? vfork() : fork();
            if (pid == 0) {
                if (prog) execv(prog[0], prog);
                _exit(prog ? 127 : 0);
            }
            if (pid < 0) { perror("fork"); return 1; }
        }
        int status;
        if (waitpid(pid, &status, 0) < 0) { perror("waitpid"); return 1; }
        if (i >= 0) {
            times[i] = now_us() - t0;
            total += times[i];
        }
        if (turn_w >= 0 && write(turn_w, &token, 1) < 0 && i + 1 < iterations) {
            perror("passing the turn");
            return 1;
        }
    }
    qsort(times, (size_t)iterations, sizeof(double), cmp_double);
    double median = iterations % 2 ? times[iterations / 2]
                                   : (times[iterations / 2 - 1] + times[iterations / 2]) / 2;
    printf("us_per_iter %.3f\nus_per_iter_median %.3f\n", total / iterations, median);
    return 0;
}
