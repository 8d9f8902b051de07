/* lab/mpi/mpi_check.c: an MPI program that checks its own results.
 *
 * Each iteration: a ring exchange of SIZE bytes (every byte derived from
 * the sender's rank, the iteration and the offset, checked by the
 * receiver), then an MPI_Allreduce of a vector whose sum is known in
 * advance (checked by every rank). Runs for SECONDS (rank 0 decides when
 * to stop, the decision is part of the allreduce), records the longest gap
 * between two iterations, and prints one summary line from rank 0:
 *
 *   MPI_CHECK ranks=2 iters=N errors=0 elapsed_s=.. max_gap_ms=.. ring_MBps=.. iter_us=..
 *
 * usage: mpi_check [SECONDS [SIZE]]     (defaults 4 s, 65536 bytes)
 * exit status: 0 when no error was found on any rank.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NRED 64

static unsigned char pattern(int rank, long iter, long off)
{
	return (unsigned char)(rank * 131 + iter * 7 + off * 13);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 4;
	long size = argc > 2 ? atol(argv[2]) : 65536;
	int rank, n;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	unsigned char *sbuf = malloc(size), *rbuf = malloc(size);
	long long errors = 0, iters = 0;
	int next = (rank + 1) % n, prev = (rank + n - 1) % n;
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) {
		/* the lab cuts a link only once the traffic started */
		printf("MPI_CHECK started ranks=%d\n", n);
		fflush(stdout);
	}
	double t0 = MPI_Wtime(), last = t0, max_gap = 0;
	for (;;) {
		for (long i = 0; i < size; i++)
			sbuf[i] = pattern(rank, iters, i);
		memset(rbuf, 0, size);
		MPI_Sendrecv(sbuf, size, MPI_BYTE, next, 1, rbuf, size, MPI_BYTE, prev, 1,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		for (long i = 0; i < size; i++)
			if (rbuf[i] != pattern(prev, iters, i)) {
				if (errors < 5)
					fprintf(stderr, "rank %d iter %lld: byte %ld is %u, want %u\n", rank,
						iters, i, rbuf[i], pattern(prev, iters, i));
				errors++;
				break;
			}
		/* v[0] carries "go on" (rank 0 decides), v[1..] a known sum */
		int64_t v[NRED], r[NRED];
		double t = MPI_Wtime();
		v[0] = rank == 0 ? (t - t0 < seconds) : 1;
		for (int k = 1; k < NRED; k++)
			v[k] = (int64_t)(rank + 1) * k + iters;
		MPI_Allreduce(v, r, NRED, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
		for (int k = 1; k < NRED; k++)
			if (r[k] != (int64_t)k * n * (n + 1) / 2 + (int64_t)n * iters) {
				if (errors < 5)
					fprintf(stderr, "rank %d iter %lld: allreduce[%d]=%lld\n", rank, iters, k,
						(long long)r[k]);
				errors++;
				break;
			}
		iters++;
		t = MPI_Wtime();
		if (t - last > max_gap)
			max_gap = t - last;
		last = t;
		if (r[0] < n) /* rank 0 said stop */
			break;
	}
	double el = MPI_Wtime() - t0;
	long long all_errors = 0;
	double worst_gap = 0;
	MPI_Reduce(&errors, &all_errors, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&max_gap, &worst_gap, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Bcast(&all_errors, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("MPI_CHECK ranks=%d iters=%lld errors=%lld elapsed_s=%.3f max_gap_ms=%.1f ring_MBps=%.2f iter_us=%.0f\n",
		       n, iters, all_errors, el, worst_gap * 1e3, iters * (double)size / el / 1e6,
		       el / iters * 1e6);
	free(sbuf);
	free(rbuf);
	MPI_Finalize();
	return all_errors ? 1 : 0;
}
