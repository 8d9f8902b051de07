/* A program that forks without exec, as a launcher or a Python worker
 * does: the parent opens the device, runs an RC QP, and forks while it
 * holds them; the child opens the device again and runs a QP of its own
 * from creation to destruction, then polls the CQ it inherited and
 * destroys the QP and CQ it inherited (a child may clean up, as a forked
 * Python worker's destructors do), and exits. The parent also has a QP
 * that posts through the ibv_wr_* API, on an extended CQ it polls with
 * ibv_poll_cq before the fork and with ibv_start_poll after; the child
 * posts a batch on it and polls that CQ with ibv_start_poll (its first
 * such poll), then destroys both. The parent waits for the child (for at
 * most 10 s) and then runs its own QP on. Prints one line per process. */
#include "connect.h"
#include <errno.h>
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

/* open_wr_qp makes a connected RC QP beside qp, on its PD and on an
 * extended CQ of its own (*xcq), that posts through the ibv_wr_* API
 * (RDMA WRITE); NULL when a verb fails. */
static struct ibv_qp *open_wr_qp(struct ibv_qp *qp, struct ibv_cq_ex **xcq)
{
	struct ibv_cq_init_attr_ex ca = {.cqe = 64};
	*xcq = ibv_create_cq_ex(qp->context, &ca);
	if (!*xcq)
		return NULL;
	struct ibv_cq *cq = ibv_cq_ex_to_cq(*xcq);
	struct ibv_qp_init_attr_ex ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = qp->pd,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE};
	struct ibv_qp *w = ibv_create_qp_ex(qp->context, &ia);
	if (!w || probe_connect(w))
		return NULL;
	return w;
}

/* poll_ex polls xcq once: with ibv_start_poll / ibv_next_poll /
 * ibv_end_poll (start), or with ibv_poll_cq. The completions it found, or
 * -1. */
static int poll_ex(struct ibv_cq_ex *xcq, int start)
{
	if (!start) {
		struct ibv_wc wc[16];
		return ibv_poll_cq(ibv_cq_ex_to_cq(xcq), 16, wc);
	}
	struct ibv_poll_cq_attr attr = {0};
	int ret = ibv_start_poll(xcq, &attr);
	if (ret)
		return ret == ENOENT ? 0 : -1;
	int got = 0;
	do
		got++;
	while (ibv_next_poll(xcq) == 0);
	ibv_end_poll(xcq);
	return got;
}

/* wr_batch posts n signaled RDMA WRITEs on qp in one ibv_wr_* batch
 * (made-up keys: the stand-in executes nothing), then polls xcq (see
 * poll_ex) until n completions came or 1,000 polls found none; the
 * completions seen, or -1 when ibv_wr_complete or a poll fails. */
static long wr_batch(struct ibv_qp *qp, struct ibv_cq_ex *xcq, int n, int start)
{
	static char data[64];
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qp);
	ibv_wr_start(qpx);
	for (int i = 0; i < n; i++) {
		qpx->wr_id = 5000 + i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, 0x5151, 0x100000ull + (uint64_t)i * 64);
		ibv_wr_set_sge(qpx, 0x1717, (uintptr_t)data, sizeof(data));
	}
	if (ibv_wr_complete(qpx))
		return -1;
	long seen = 0;
	for (int idle = 0; seen < n && idle < 1000; idle++) {
		int got = poll_ex(xcq, start);
		if (got < 0)
			return -1;
		if (got > 0)
			seen += got, idle = 0;
	}
	return seen;
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
	struct ibv_cq_ex *xcq;
	struct ibv_qp *wqp = open_wr_qp(qp, &xcq);
	if (!wqp)
		return 2;
	long before = run(qp, cq, n), wbefore = wr_batch(wqp, xcq, 8, 0);
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
		long wr = wr_batch(wqp, xcq, 8, 1);
		struct ibv_wc wc[16];
		int left = ibv_poll_cq(cq, 16, wc);
		int inherited = ibv_destroy_qp(qp);
		int inherited_wr = ibv_destroy_qp(wqp);
		int inherited_cq = ibv_destroy_cq(cq);
		int inherited_xcq = ibv_destroy_cq(ibv_cq_ex_to_cq(xcq));
		printf("child: completions %ld close %d; the inherited wr-API QP's batch %ld, the inherited CQ polled %d, "
		       "QPs destroyed %d %d, CQs destroyed %d %d\n",
		       seen, ret, wr, left, inherited, inherited_wr, inherited_cq, inherited_xcq);
		fflush(stdout);
		_exit(seen < 0 || ret ? 5 : 0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return 6;
	long after = run(qp, cq, n), wafter = wr_batch(wqp, xcq, 8, 1);
	int wclose = ibv_destroy_qp(wqp);
	if (!wclose)
		wclose = ibv_destroy_cq(ibv_cq_ex_to_cq(xcq));
	printf("parent: completions %ld then %ld, wr-API batches %ld then %ld, close %d %d; child %s %d\n", before,
	       after, wbefore, wafter, wclose, close_qp(qp, cq),
	       WIFEXITED(st) ? "exited" : "killed by signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	return 0;
}
