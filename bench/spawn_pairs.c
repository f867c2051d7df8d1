/*
 * spawn_pairs: what forkprof costs one spawn, measured against another spawn in the same run,
 * so that the host's slow drift (which moves a whole run of the bench loop by 5-10%, and
 * a difference between two runs by as much) cancels.
 *
 *   spawn_pairs args PAIRS PROGRAM
 *   spawn_pairs servers PAIRS REQUESTS_A REPLIES_A REQUESTS_B REPLIES_B [BLOCK]
 *   spawn_pairs serve PROGRAM REQUESTS REPLIES
 *
 * Each pair is two spawns of PROGRAM (fork, exec, wait), A and B, in an order drawn at
 * random. Each spawn is timed from before its fork to after its wait returns
 * (CLOCK_MONOTONIC), and its CPU time (user + system, exact in sum; the rusage of wait4,
 * in whole microseconds) is the child's.
 *
 * `args`: A runs PROGRAM with no arguments and B with one. With FORKPROF_BENCH_EMPTY=1
 *   FORKPROF_BENCH_BURN=STEPS, forkprof's empty exec program runs a loop of STEPS
 *   register-only steps for A, and nothing for B: what a known amount of program time costs
 *   the spawn (BENCHMARKS.md). Without the burn it is an A/A check of one argument.
 * `servers`: A and B are spawned by two servers (`spawn_pairs serve PROGRAM REQUESTS
 *   REPLIES`, on FIFOs), started the same way but for one thing: bench/spawn-pairs.sh
 *   starts A inside `forkprof run`, which follows it and its children, and B outside it,
 *   whose spawns forkprof's programs see and leave at their first checks.
 *   With BLOCK above 1, the spawns come in blocks of BLOCK of one server's, then BLOCK of
 *   the other's (the blocks' order drawn at random), and pair i of a block is the i-th
 *   spawn of each: every spawn but a block's first then follows one of its own server's.
 *   In random order, a spawn follows one of the other server's three times in four, so
 *   what a spawn of A leaves behind for the next (caches, branch predictors), x, lands on
 *   B's spawns three times as often as on A's, and the difference reads x/2 less than what
 *   A's spawns cost; in blocks of L it reads about x (1 - 1.5/L) more, between runs of a
 *   loop x more, so blocks less random order is about 1.5 x (BENCHMARKS.md, "The lead
 *   tested"). The price: a pair's two spawns are up to 2 BLOCK - 1 spawns apart, so the
 *   host's drift cancels less well than in random order, where they are side by side.
 * `serve`: for each byte read from the FIFO REQUESTS, spawns PROGRAM and writes its wall and
 *   CPU time (two int64 nanosecond counts) to the FIFO REPLIES; returns at end of input.
 *
 * Prints one line on stdout:
 *
 *   spawn_pairs: MODE pairs=N block=L b_us=W b_cpu_us=C wall_us=D (LO .. HI) wall_mean_us=M cpu_us=E (LO .. HI) cpu_mean_us=K
 *
 * W and C are B's medians; D and E the medians of the pairs' differences A less B, with
 * their 90% intervals (order statistics, by the normal approximation of the binomial); M
 * and K the means of the differences with the 1% of each tail left out; L is BLOCK (1 for
 * random order, and always for `args`). Exits 1 if a spawn
 * fails, 2 on bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct sample {
	int64_t wall_ns;
	int64_t cpu_ns;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* One spawn of `prog`, with `arg` as its only argument if not NULL. */
static int spawn(const char *prog, const char *arg, struct sample *s)
{
	int64_t start = now_ns();
	pid_t pid = fork();
	if (pid < 0) {
		perror("spawn_pairs: fork");
		return -1;
	}
	if (pid == 0) {
		execl(prog, prog, arg, (char *)NULL);
		_exit(127);
	}
	int status;
	struct rusage usage;
	if (wait4(pid, &status, 0, &usage) != pid) {
		perror("spawn_pairs: wait4");
		return -1;
	}
	s->wall_ns = now_ns() - start;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "spawn_pairs: %s exited with status %d\n", prog, status);
		return -1;
	}
	s->cpu_ns = ((int64_t)usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000000LL +
		    ((int64_t)usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1000LL;
	return 0;
}

static int full_io(int fd, void *buf, size_t len, int writing)
{
	char *p = buf;
	while (len > 0) {
		ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int serve(int in, int out, const char *prog)
{
	char c;
	ssize_t n;
	while ((n = read(in, &c, 1)) == 1 || (n < 0 && errno == EINTR)) {
		if (n != 1)
			continue;
		struct sample s;
		if (spawn(prog, NULL, &s) != 0)
			return 1;
		if (full_io(out, &s, sizeof(s), 1) != 0)
			return 1;
	}
	return 0;
}

/* One spawn by the server at the other end of `req` and `rep`. */
static int ask(int req, int rep, struct sample *s)
{
	char c = 1;
	if (full_io(req, &c, 1, 1) != 0 || full_io(rep, s, sizeof(*s), 0) != 0) {
		fprintf(stderr, "spawn_pairs: a server stopped answering\n");
		return -1;
	}
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Sorts `v` and returns its median, in microseconds. */
static double median_us(double *v, long n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) / 1e3;
}

/* Sorts `v`, then prints its median (in microseconds), the median's 90% interval, and
 * the mean of `v` with the 1% of each tail left out. */
static void summary(const char *name, double *v, long n)
{
	double m = median_us(v, n);
	long k = (long)floor((double)n / 2 - 1.645 * sqrt((double)n) / 2); /* 1-based rank */
	if (k < 1)
		k = 1;
	long trim = n / 100;
	double sum = 0;
	for (long i = trim; i < n - trim; i++)
		sum += v[i];
	printf(" %s_us=%.2f (%.2f .. %.2f) %s_mean_us=%.2f", name, m, v[k - 1] / 1e3,
	       v[n - k] / 1e3, name, sum / (double)(n - 2 * trim) / 1e3);
}

static int usage(void)
{
	fprintf(stderr, "usage: spawn_pairs args PAIRS PROGRAM\n"
			"       spawn_pairs servers PAIRS REQUESTS_A REPLIES_A REQUESTS_B REPLIES_B "
			"[BLOCK]\n"
			"       spawn_pairs serve PROGRAM REQUESTS REPLIES\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "serve") == 0) {
		int in = open(argv[3], O_RDONLY), out = open(argv[4], O_WRONLY);
		if (in < 0 || out < 0) {
			perror("spawn_pairs: serve: the FIFOs");
			return 1;
		}
		return serve(in, out, argv[2]);
	}
	int servers = (argc == 7 || argc == 8) && strcmp(argv[1], "servers") == 0;
	if (!servers && !(argc == 4 && strcmp(argv[1], "args") == 0))
		return usage();
	char *end = NULL;
	errno = 0;
	long n = strtol(argv[2], &end, 10);
	if (errno || end == argv[2] || *end || n < 10 || n > 10000000) {
		fprintf(stderr, "spawn_pairs: bad PAIRS '%s' (10 or more)\n", argv[2]);
		return 2;
	}
	long block = 1;
	if (servers && argc == 8) {
		end = NULL;
		errno = 0;
		block = strtol(argv[7], &end, 10);
		if (errno || end == argv[7] || *end || block < 1 || block > n) {
			fprintf(stderr, "spawn_pairs: bad BLOCK '%s' (1 to PAIRS)\n", argv[7]);
			return 2;
		}
	}
	const char *prog = servers ? NULL : argv[3];
	/* servers: A's FIFOs, then B's */
	int req[2] = {-1, -1}, rep[2] = {-1, -1};
	for (int i = 0; servers && i < 2; i++) {
		req[i] = open(argv[3 + 2 * i], O_WRONLY);
		rep[i] = open(argv[4 + 2 * i], O_RDONLY);
		if (req[i] < 0 || rep[i] < 0) {
			perror("spawn_pairs: a server's FIFOs");
			return 1;
		}
	}
	double *b_wall = malloc(sizeof(double) * (size_t)n);
	double *b_cpu = malloc(sizeof(double) * (size_t)n);
	double *d_wall = malloc(sizeof(double) * (size_t)n);
	double *d_cpu = malloc(sizeof(double) * (size_t)n);
	if (!b_wall || !b_cpu || !d_wall || !d_cpu) {
		fprintf(stderr, "spawn_pairs: out of memory\n");
		return 1;
	}
	/* One block's samples of each server: [0]: A, [1]: B. */
	struct sample *blk[2] = {malloc(sizeof(struct sample) * (size_t)block),
				 malloc(sizeof(struct sample) * (size_t)block)};
	if (!blk[0] || !blk[1]) {
		fprintf(stderr, "spawn_pairs: out of memory\n");
		return 1;
	}
	uint64_t rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)now_ns();
	for (long i0 = 0; i0 < n; i0 += block) {
		long len = n - i0 < block ? n - i0 : block;
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		int b_first = (int)(rng >> 63);
		for (int j = 0; j < 2; j++) {
			int which = b_first ? !j : j;
			for (long i = 0; i < len; i++) {
				struct sample *s = &blk[which][i];
				int failed = servers ? ask(req[which], rep[which], s)
						    : spawn(prog, which ? "b" : NULL, s);
				if (failed)
					return 1;
			}
		}
		for (long i = 0; i < len; i++) {
			b_wall[i0 + i] = (double)blk[1][i].wall_ns;
			b_cpu[i0 + i] = (double)blk[1][i].cpu_ns;
			d_wall[i0 + i] = (double)(blk[0][i].wall_ns - blk[1][i].wall_ns);
			d_cpu[i0 + i] = (double)(blk[0][i].cpu_ns - blk[1][i].cpu_ns);
		}
	}
	printf("spawn_pairs: %s pairs=%ld block=%ld b_us=%.2f b_cpu_us=%.2f", argv[1], n, block,
	       median_us(b_wall, n), median_us(b_cpu, n));
	summary("wall", d_wall, n);
	summary("cpu", d_cpu, n);
	printf("\n");
	return 0;
}
