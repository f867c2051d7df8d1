/* forkprof bench's spawn loop. Built twice by forkprof's build.rs (static and dynamic) and
 * embedded in forkprof, so `forkprof bench` needs no compiler where it runs.
 *
 *   driver METHOD ITERATIONS [PROGRAM ARGS...]
 *     METHOD: fork | vfork | posix_spawn. The child _exit(0)s, or execs PROGRAM.
 *     FP_RSS_MIB=N: touch N MiB (no transparent huge pages) before the loop.
 *   Prints "us_per_iter <float>": the loop's wall time (CLOCK_MONOTONIC) / ITERATIONS. */
#define _GNU_SOURCE
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

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s fork|vfork|posix_spawn ITERATIONS [PROGRAM ARGS...]\n", argv[0]);
        return 2;
    }
    const char *method = argv[1];
    long iterations = atol(argv[2]);
    char **prog = argc > 3 ? argv + 3 : NULL;
    const char *rss = getenv("FP_RSS_MIB");
    if (rss && atol(rss) > 0) {
        size_t len = (size_t)atol(rss) << 20;
        char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("mmap"); return 1; }
        madvise(p, len, MADV_NOHUGEPAGE);
        for (size_t i = 0; i < len; i += 4096) p[i] = 1;
    }
    if (strcmp(method, "posix_spawn") == 0 && !prog) {
        fprintf(stderr, "posix_spawn needs a PROGRAM\n");
        return 2;
    }
    double start = now_us();
    for (long i = 0; i < iterations; i++) {
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
    }
    printf("us_per_iter %.3f\n", (now_us() - start) / iterations);
    return 0;
}
