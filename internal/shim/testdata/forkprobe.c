/* A program that forks without exec, as a launcher or a Python worker
 * does: the parent opens the device, runs an RC QP, and forks while it
 * holds them; the child opens the device again and runs a QP of its own
 * from creation to destruction, then polls the CQ it inherited and
 * destroys the QP and CQ it inherited (a child may clean up, as a forked
 * Python worker's destructors do), and exits. The parent waits for the child (for at
 * most 10 s) and then runs its own QP on. Prints one line per process. */
#include "connect.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>

struct ibv_device *fake_device(void);

/* run posts n receive and RDMA WRITE pairs on qp, every 4th WRITE
 * signaled, and polls cq after each; it returns the completions seen, or
 * -1 when a verb fails. */
static long run(struct ibv_qp *qp, struct ibv_cq *cq, int n)
{
	long seen = 0;
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr rw = {.wr_id = 1000000 + i}, *rbad;
		struct ibv_send_wr sw = {.wr_id = i, .opcode = IBV_WR_RDMA_WRITE, .send_flags = (i % 4 == 3) ? IBV_SEND_SIGNALED : 0}, *sbad;
		if (ibv_post_recv(qp, &rw, &rbad) || ibv_post_send(qp, &sw, &sbad))
			return -1;
		struct ibv_wc wc[16];
		int got;
		while ((got = ibv_poll_cq(cq, 16, wc)) > 0)
			seen += got;
		if (got < 0)
			return -1;
	}
	return seen;
}

/* open_qp opens the device and makes a connected RC QP on a CQ of its
 * own; NULL when a verb fails. */
static struct ibv_qp *open_qp(struct ibv_cq **cq)
{
	struct ibv_context *ctx = ibv_open_device(fake_device());
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	*cq = pd ? ibv_create_cq(ctx, 256, NULL, NULL, 0) : NULL;
	if (!*cq)
		return NULL;
	struct ibv_qp_init_attr ia = {.send_cq = *cq, .recv_cq = *cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp || probe_connect(qp))
		return NULL;
	return qp;
}

/* close_qp destroys what open_qp made; 0 or the first error. */
static int close_qp(struct ibv_qp *qp, struct ibv_cq *cq)
{
	struct ibv_context *ctx = qp->context;
	struct ibv_pd *pd = qp->pd;
	int ret = ibv_destroy_qp(qp);
	if (!ret)
		ret = ibv_destroy_cq(cq);
	if (!ret)
		ret = ibv_dealloc_pd(pd);
	if (!ret)
		ret = ibv_close_device(ctx);
	return ret;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	struct ibv_cq *cq;
	struct ibv_qp *qp = open_qp(&cq);
	if (!qp)
		return 2;
	long before = run(qp, cq, n);
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return 3;
	if (pid == 0) {
		alarm(10); /* a child stuck in the shim dies of SIGALRM */
		struct ibv_cq *ccq;
		struct ibv_qp *cqp = open_qp(&ccq);
		if (!cqp)
			_exit(4);
		long seen = run(cqp, ccq, n);
		int ret = close_qp(cqp, ccq);
		struct ibv_wc wc[16];
		int left = ibv_poll_cq(cq, 16, wc);
		int inherited = ibv_destroy_qp(qp);
		int inherited_cq = ibv_destroy_cq(cq);
		printf("child: completions %ld close %d; the inherited CQ polled %d, QP destroyed %d, CQ destroyed %d\n",
		       seen, ret, left, inherited, inherited_cq);
		fflush(stdout);
		_exit(seen < 0 || ret ? 5 : 0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return 6;
	long after = run(qp, cq, n);
	printf("parent: completions %ld then %ld close %d; child %s %d\n", before, after, close_qp(qp, cq),
	       WIFEXITED(st) ? "exited" : "killed by signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	return 0;
}
