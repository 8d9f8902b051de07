/* An RDMA program that knows nothing of ibpath: opens the device, makes an
 * RC QP, connects it, posts and polls work, prints what it saw. With
 * "wait" it stops before destroying the QP until a line arrives on stdin.
 * With "chan" ("chanex": the CQ from ibv_create_cq_ex) it waits for its
 * completions on a completion channel: poll(2) on the channel's fd, or
 * for every 50th post a blocking ibv_get_cq_event while another thread
 * posts; at the end a get on the fd made non-blocking, with nothing
 * pending.
 *
 * With "exwr" the QP comes from ibv_create_qp_ex asking for the ibv_wr_*
 * send API with the operations a shim may follow, and the program posts
 * its sends through that API: batches of one to four WRs of every
 * operation asked for, their data as one SGE, an SGE list, inline data or
 * an inline list (whose sources it scribbles over as soon as they are
 * given), one batch it aborts, one empty, and a refused batch
 * (ibv_wr_complete's error; nothing of it may be posted). "exinv" asks
 * for RDMA WRITE and local invalidate (which a shim may not follow) and
 * posts only RDMA WRITEs. Both print what the stand-in provider put on
 * the wire (fake_wire) and the completions in the order polled; on
 * stderr, the library whose ibv_wr_* functions the QP has. "exwrmt" is
 * "exwr"'s QP with eight threads posting one-WR batches to it at once
 * (n each), unsignaled: every WR must reach the provider. */
#define _GNU_SOURCE
#include "connect.h"
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

struct ibv_device *fake_device(void);
void fake_raise_port(int type, int port);
void fake_wire(uint64_t *wrs, uint64_t *bytes, uint64_t *hash);
uint32_t fake_qp_asked(struct ibv_qp *qp);
int fake_srq_deliver(struct ibv_qp *qp, int n);

#define EVENT_TIMEOUT_MS 5000

static long sends, recvs, sum;
/* the completions in the order polled: wr_id, opcode, status */
static uint64_t polled = 0xcbf29ce484222325ull;

/* startpoll: drain polls this extended CQ with ibv_start_poll,
 * ibv_next_poll and ibv_end_poll ("exstart" mode) */
static struct ibv_cq_ex *startpoll;

static void count(uint64_t wr_id, enum ibv_wc_opcode opcode, enum ibv_wc_status status)
{
	if (opcode & IBV_WC_RECV)
		recvs++;
	else
		sends++;
	sum += wr_id;
	polled = (polled ^ wr_id) * 0x100000001b3ull;
	polled = (polled ^ ((uint64_t)opcode << 8 | status)) * 0x100000001b3ull;
}

static void drain(struct ibv_cq *cq)
{
	struct ibv_wc wc[16];
	int got;
	if (startpoll) {
		struct ibv_poll_cq_attr attr = {0};
		if (ibv_start_poll(startpoll, &attr))
			return;
		do
			count(startpoll->wr_id, ibv_wc_read_opcode(startpoll), startpoll->status);
		while (ibv_next_poll(startpoll) == 0);
		ibv_end_poll(startpoll);
		return;
	}
	while ((got = ibv_poll_cq(cq, 16, wc)) > 0)
		for (int k = 0; k < got; k++)
			count(wc[k].wr_id, wc[k].opcode, wc[k].status);
}

/* post is one step of the traffic: a receive and a write (every 4th
 * signaled). 0, or the exit code. */
static int post(struct ibv_qp *qp, int i)
{
	struct ibv_recv_wr rw = {.wr_id = 1000000 + i}, *rbad;
	if (ibv_post_recv(qp, &rw, &rbad))
		return 2;
	struct ibv_send_wr sw = {.wr_id = i, .opcode = IBV_WR_RDMA_WRITE, .send_flags = (i % 4 == 3) ? IBV_SEND_SIGNALED : 0}, *sbad;
	if (ibv_post_send(qp, &sw, &sbad))
		return 3;
	return 0;
}

/* The ibv_wr_* traffic. Remote addresses and keys are made up: the
 * stand-in executes nothing but reads the local payload. */
#define RKEY 0x5151
#define LKEY 0x1717
#define RBASE 0x100000ull

static uint8_t payload[4096];      /* the SGEs' data: untouched until completion */
static uint8_t landing[64 * 32];   /* where READs and atomics land */
static uint8_t inl_a[48], inl_b[40]; /* inline sources: scribbled over once given */

/* wr_one adds step i's WR to the batch: its operation (only RDMA WRITE
 * with writes_only) and the way its data is given vary with i. */
static void wr_one(struct ibv_qp_ex *qpx, int i, int writes_only)
{
	static const enum ibv_wr_opcode ops[] = {IBV_WR_RDMA_WRITE, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
		IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD,
		IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_RDMA_WRITE};
	enum ibv_wr_opcode op = writes_only ? IBV_WR_RDMA_WRITE : ops[i % 9];
	unsigned int flags = i % 4 == 3 ? IBV_SEND_SIGNALED : 0;
	if ((op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM) && i % 3 == 0)
		flags |= IBV_SEND_SOLICITED;
	if (op == IBV_WR_RDMA_READ)
		flags |= IBV_SEND_FENCE;
	qpx->wr_id = i;
	qpx->wr_flags = flags;
	uint64_t raddr = RBASE + (uint64_t)i * 64;
	__be32 imm = htobe32(0xa5000000u | (uint32_t)i);
	uint8_t *land = landing + (size_t)(i % 64) * 32;
	switch (op) {
	case IBV_WR_RDMA_WRITE:
		ibv_wr_rdma_write(qpx, RKEY, raddr);
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		ibv_wr_rdma_write_imm(qpx, RKEY, raddr, imm);
		break;
	case IBV_WR_SEND:
		ibv_wr_send(qpx);
		break;
	case IBV_WR_SEND_WITH_IMM:
		ibv_wr_send_imm(qpx, imm);
		break;
	case IBV_WR_RDMA_READ:
		ibv_wr_rdma_read(qpx, RKEY, raddr);
		ibv_wr_set_sge(qpx, LKEY, (uintptr_t)land, 32);
		return;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		ibv_wr_atomic_fetch_add(qpx, RKEY, raddr, (uint64_t)i);
		ibv_wr_set_sge(qpx, LKEY, (uintptr_t)land, 8);
		return;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		ibv_wr_atomic_cmp_swp(qpx, RKEY, raddr, (uint64_t)i, ~(uint64_t)i);
		ibv_wr_set_sge(qpx, LKEY, (uintptr_t)land, 8);
		return;
	default:
		abort();
	}
	size_t off = (size_t)i * 37 % 2048, la = 1 + (size_t)i % sizeof(inl_a), lb = 1 + (size_t)i * 7 % sizeof(inl_b);
	switch (i / 2 % 4) {
	case 0:
		ibv_wr_set_sge(qpx, LKEY, (uintptr_t)payload + off, (uint32_t)la * 8);
		break;
	case 1: {
		struct ibv_sge l[4];
		size_t n = 2 + (size_t)i % 3;
		for (size_t k = 0; k < n; k++)
			l[k] = (struct ibv_sge){.addr = (uintptr_t)payload + off + k * 512, .length = (uint32_t)(la + k * 3), .lkey = LKEY + (uint32_t)k};
		ibv_wr_set_sge_list(qpx, n, l);
		break;
	}
	case 2:
		for (size_t k = 0; k < la; k++)
			inl_a[k] = (uint8_t)(i * 13 + k);
		ibv_wr_set_inline_data(qpx, inl_a, la);
		memset(inl_a, 0xee, sizeof(inl_a));
		break;
	case 3: {
		for (size_t k = 0; k < la; k++)
			inl_a[k] = (uint8_t)(i * 13 + k);
		for (size_t k = 0; k < lb; k++)
			inl_b[k] = (uint8_t)(i * 29 + k * 5);
		struct ibv_data_buf d[2] = {{inl_a, la}, {inl_b, lb}};
		ibv_wr_set_inline_data_list(qpx, 2, d);
		memset(inl_a, 0xee, sizeof(inl_a));
		memset(inl_b, 0xdd, sizeof(inl_b));
		break;
	}
	}
}

/* wr_traffic is the traffic of n steps through the ibv_wr_* API: a
 * receive per step (ibv_post_recv), the steps' WRs in batches of one to
 * four (every 4th signaled, as post's), drained after each batch. After
 * the 4th batch, one the program aborts and one with nothing in it. 0, or
 * the exit code. */
static int wr_traffic(struct ibv_qp *qp, struct ibv_qp_ex *qpx, struct ibv_cq *cq, int n, int writes_only)
{
	for (size_t k = 0; k < sizeof(payload); k++)
		payload[k] = (uint8_t)(k * 131 + 7);
	for (int i = 0, b = 0; i < n; b++) {
		int k = 1 + b % 4;
		if (k > n - i)
			k = n - i;
		for (int j = 0; j < k; j++) {
			struct ibv_recv_wr rw = {.wr_id = 1000000 + i + j}, *rbad;
			if (ibv_post_recv(qp, &rw, &rbad))
				return 2;
		}
		ibv_wr_start(qpx);
		for (int j = 0; j < k; j++)
			wr_one(qpx, i + j, writes_only);
		int ret = ibv_wr_complete(qpx);
		if (ret) {
			fprintf(stderr, "probe: ibv_wr_complete of steps %d..%d: %s\n", i, i + k - 1, strerror(ret));
			return 3;
		}
		i += k;
		drain(cq);
		if (b == 3) {
			ibv_wr_start(qpx);
			qpx->wr_id = 0xab0;
			qpx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_rdma_write(qpx, RKEY, RBASE);
			ibv_wr_set_inline_data(qpx, (void *)"aborted", 7);
			qpx->wr_id = 0xab1;
			ibv_wr_rdma_write(qpx, RKEY, RBASE + 64);
			ibv_wr_set_sge(qpx, LKEY, (uintptr_t)payload, 64);
			ibv_wr_abort(qpx);
			ibv_wr_start(qpx);
			if ((ret = ibv_wr_complete(qpx))) {
				fprintf(stderr, "probe: ibv_wr_complete of an empty batch: %s\n", strerror(ret));
				return 3;
			}
		}
	}
	return 0;
}

/* wr_refused posts a batch of a good WR (signaled) and one the provider
 * refuses (wr_id 0xbad): ibv_wr_complete's error. *none: nothing of it
 * completed. */
static int wr_refused(struct ibv_qp_ex *qpx, struct ibv_cq *cq, int *none)
{
	ibv_wr_start(qpx);
	qpx->wr_id = 7777;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, RKEY, RBASE);
	ibv_wr_set_sge(qpx, LKEY, (uintptr_t)payload, 16);
	qpx->wr_id = 0xbad;
	qpx->wr_flags = 0;
	ibv_wr_rdma_write(qpx, RKEY, RBASE + 64);
	ibv_wr_set_sge(qpx, LKEY, (uintptr_t)payload + 16, 16);
	int ret = ibv_wr_complete(qpx);
	long before = sends;
	drain(cq);
	*none = sends == before;
	return ret;
}

/* The threads of "exwrmt": wr_start serialises them. */
#define MT_THREADS 8

struct mt {
	struct ibv_qp_ex *qpx;
	int id, n;
	long errors;
};

static void *mt_post(void *arg)
{
	struct mt *m = arg;
	for (int i = 0; i < m->n; i++) {
		ibv_wr_start(m->qpx);
		m->qpx->wr_id = ((uint64_t)(m->id + 1) << 32) + (uint64_t)i;
		m->qpx->wr_flags = 0;
		ibv_wr_rdma_write(m->qpx, RKEY, RBASE + (uint64_t)i * 64);
		ibv_wr_set_sge(m->qpx, LKEY, (uintptr_t)payload + (size_t)m->id * 64, 8);
		if (ibv_wr_complete(m->qpx))
			m->errors++;
	}
	return NULL;
}

/* mt_traffic runs MT_THREADS threads of n batches each; *errors: the
 * failed ibv_wr_complete. 0, or the exit code. */
static int mt_traffic(struct ibv_qp_ex *qpx, int n, long *errors)
{
	struct mt m[MT_THREADS];
	pthread_t th[MT_THREADS];
	for (int t = 0; t < MT_THREADS; t++) {
		m[t] = (struct mt){.qpx = qpx, .id = t, .n = n};
		if (pthread_create(&th[t], NULL, mt_post, &m[t]))
			return 20;
	}
	*errors = 0;
	for (int t = 0; t < MT_THREADS; t++) {
		pthread_join(th[t], NULL);
		*errors += m[t].errors;
	}
	return 0;
}

/* lib names the library of an ibv_wr_* function */
static const char *lib(void *f)
{
	Dl_info di;
	if (!f)
		return "(none)";
	if (!dladdr(f, &di) || !di.dli_fname)
		return "?";
	const char *b = strrchr(di.dli_fname, '/');
	return b ? b + 1 : di.dli_fname;
}

struct late_post {
	struct ibv_qp *qp;
	int i, ret;
};

static void *post_later(void *arg)
{
	struct late_post *l = arg;
	usleep(20000);
	l->ret = post(l->qp, l->i);
	return NULL;
}

static void stuck(int sig)
{
	static const char msg[] = "probe: ibv_get_cq_event blocked for 5 s: the completion event never came\n";
	if (write(2, msg, sizeof(msg) - 1) < 0) {
	}
	_exit(7);
}

static const char *errname(int e)
{
	return e == EAGAIN ? "EAGAIN" : e == EBUSY ? "EBUSY" : strerror(e);
}

/* the kind of file the channel's fd is, for stderr ("pipe" for the
 * kernel's event file of the stand-in) */
static void say_fd(int fd)
{
	char path[64], link[PATH_MAX];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		n = 0;
	link[n] = 0;
	fprintf(stderr, "probe: channel fd is %s\n", strncmp(link, "pipe:", 5) == 0 ? "pipe" : link);
}

/* events runs the traffic of n steps waiting on ch for cq's events (the
 * CQ is armed already), then tries a get on the fd made non-blocking
 * (nb_err: its errno). 0, or the exit code. */
static int events(struct ibv_qp *qp, struct ibv_cq *cq, void *cq_tag, struct ibv_comp_channel *ch, int n, int *nev, int *nblock, int *nb_err)
{
	for (int i = 0; i < n; i++) {
		int blocking = i % 50 == 49, ret;
		pthread_t th;
		struct late_post l = {qp, i, 0};
		if (blocking) {
			/* the completion comes while this thread sleeps in
			 * ibv_get_cq_event */
			if (pthread_create(&th, NULL, post_later, &l))
				return 20;
			alarm(EVENT_TIMEOUT_MS / 1000);
		} else {
			if ((ret = post(qp, i)))
				return ret;
			struct pollfd p = {.fd = ch->fd, .events = POLLIN};
			int r = poll(&p, 1, EVENT_TIMEOUT_MS);
			if (r < 0) {
				perror("probe: poll on the channel's fd");
				return 21;
			}
			if (r == 0) {
				fprintf(stderr, "probe: step %d: the channel's fd stayed unreadable for %d ms\n", i, EVENT_TIMEOUT_MS);
				return 6;
			}
		}
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx)) {
			fprintf(stderr, "probe: step %d: ibv_get_cq_event: %s\n", i, strerror(errno));
			return 22;
		}
		if (blocking) {
			alarm(0);
			pthread_join(th, NULL);
			if (l.ret)
				return l.ret;
			(*nblock)++;
		}
		if (ev_cq != cq || ev_ctx != cq_tag) {
			fprintf(stderr, "probe: step %d: event for CQ %p context %p, want %p %p\n", i, (void *)ev_cq, ev_ctx, (void *)cq, cq_tag);
			return 23;
		}
		(*nev)++;
		ibv_ack_cq_events(ev_cq, 1);
		if ((ret = ibv_req_notify_cq(cq, 0))) {
			fprintf(stderr, "probe: ibv_req_notify_cq: %s\n", strerror(ret));
			return 24;
		}
		drain(cq);
		/* drained and armed: no event may wait */
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		if (poll(&p, 1, 0) != 0) {
			fprintf(stderr, "probe: step %d: the channel's fd is readable with no completion\n", i);
			return 25;
		}
	}
	int fl = fcntl(ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		perror("probe: make the channel's fd non-blocking");
		return 26;
	}
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	alarm(EVENT_TIMEOUT_MS / 1000);
	int r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	alarm(0);
	*nb_err = errno;
	if (r == 0) {
		fprintf(stderr, "probe: a non-blocking get returned an event with none pending\n");
		return 26;
	}
	if (fcntl(ch->fd, F_SETFL, fl) < 0) {
		perror("probe: make the channel's fd blocking again");
		return 26;
	}
	return 0;
}

/* cq_sizes ("cqe" mode): the sizes the provider gave CQs asked for n
 * entries, by ibv_create_cq and ibv_create_cq_ex, and the first after
 * ibv_resize_cq to 2n. */
static int cq_sizes(struct ibv_context *ctx, int n)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, n, NULL, NULL, 0);
	struct ibv_cq_init_attr_ex ca = {.cqe = n};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
	if (!cq || !cqx) {
		fprintf(stderr, "probe: create the CQs: %s\n", strerror(errno));
		return 10;
	}
	if (ca.cqe != (uint32_t)n) {
		fprintf(stderr, "probe: ibv_create_cq_ex changed the attributes given: cqe %u\n", ca.cqe);
		return 10;
	}
	printf("create %d create_ex %d", cq->cqe, ibv_cq_ex_to_cq(cqx)->cqe);
	if (ibv_resize_cq(cq, 2 * n) != 0) {
		fprintf(stderr, "probe: ibv_resize_cq: %s\n", strerror(errno));
		return 10;
	}
	printf(" resized %d\n", cq->cqe);
	return ibv_destroy_cq(cq) || ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) ? 10 : 0;
}

/* sq_sizes ("sq" mode): the send queue sizes QPs asked for n send WRs
 * were reported and the provider was asked for, made by ibv_create_qp, by
 * ibv_create_qp_ex, and by ibv_create_qp with sq_sig_all. */
static int sq_sizes(struct ibv_context *ctx, struct ibv_pd *pd, int n)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!cq)
		return 10;
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = n, .max_recv_wr = n, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp_init_attr sig = ia;
	sig.sq_sig_all = 1;
	struct ibv_qp_init_attr_ex iax = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = ia.cap, .pd = pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia), *qx = ibv_create_qp_ex(ctx, &iax), *qs = ibv_create_qp(pd, &sig);
	if (!qp || !qx || !qs) {
		fprintf(stderr, "probe: create the QPs: %s\n", strerror(errno));
		return 10;
	}
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	if (ibv_query_qp(qp, &qa, IBV_QP_CAP, &qi)) {
		fprintf(stderr, "probe: ibv_query_qp: %s\n", strerror(errno));
		return 10;
	}
	printf("create %u/%u create_ex %u/%u sig_all %u/%u query %u/%u\n", ia.cap.max_send_wr, fake_qp_asked(qp), iax.cap.max_send_wr,
	       fake_qp_asked(qx), sig.cap.max_send_wr, fake_qp_asked(qs), qa.cap.max_send_wr, qi.cap.max_send_wr);
	return ibv_destroy_qp(qp) || ibv_destroy_qp(qx) || ibv_destroy_qp(qs) ? 10 : 0;
}

/* dmabuf ("dmabuf" mode): registers a dma-buf (an open fd stands in for
 * the stand-in provider) and one whose fd is closed, prints what came
 * back, deregisters. */
static int dmabuf(struct ibv_pd *pd)
{
	int fd = dup(1);
	struct ibv_mr *mr = ibv_reg_dmabuf_mr(pd, 4096, 1 << 20, 0x7f0000000000ull, fd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	close(fd);
	errno = 0;
	struct ibv_mr *bad = ibv_reg_dmabuf_mr(pd, 0, 4096, 0x7f0000100000ull, fd, IBV_ACCESS_LOCAL_WRITE);
	int e = errno;
	if (!mr || bad) {
		fprintf(stderr, "probe: ibv_reg_dmabuf_mr: %p %p %s\n", (void *)mr, (void *)bad, strerror(errno));
		return 10;
	}
	printf("dmabuf lkey %#x rkey %#x addr %p length %zu; closed fd: %s\n", mr->lkey, mr->rkey, mr->addr, mr->length, strerror(e));
	return ibv_dereg_mr(mr) ? 10 : 0;
}

/* rereg ("rereg" mode): a region moved to another buffer, given another
 * access, and a refused move; prints what each call returned and left. */
static int rereg(struct ibv_pd *pd)
{
	static char a[8192], b[4096];
	struct ibv_mr *mr = ibv_reg_mr_iova2(pd, a, sizeof a, (uintptr_t)a, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return 10;
	int r1 = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b, sizeof b, 0);
	int moved = mr->addr == (void *)b && mr->length == sizeof b;
	int r2 = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	int r3 = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0);
	printf("rereg %d moved %d lkey %#x; access %d; refused %d, still at b %d\n", r1, moved, mr->lkey, r2, r3, mr->addr == (void *)b);
	return ibv_dereg_mr(mr) ? 10 : 0;
}

/* srq ("srq" mode): two RC QPs on one SRQ; n receives posted to it (one
 * refused), messages delivered to the QPs in turn; prints each
 * completion (wr_id, QP) and what the SRQ verbs returned. */
static int srq_mode(struct ibv_context *ctx, struct ibv_pd *pd, int n)
{
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 64, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!srq || !cq)
		return 10;
	struct ibv_qp *qp[2];
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
			.cap = {.max_send_wr = 16, .max_send_sge = 1}};
		if (!(qp[i] = ibv_create_qp(pd, &a)))
			return 10;
	}
	static char buf[64 * 64];
	struct ibv_mr *mr = ibv_reg_mr_iova2(pd, buf, sizeof buf, (uintptr_t)buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return 10;
	int refused = 0;
	for (int i = 0; i < n && i < 64; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)buf + 64 * i, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr w = {.wr_id = i == n / 2 ? 0xbad : (uint64_t)100 + i, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
		if (ibv_post_srq_recv(srq, &w, &bad))
			refused++;
	}
	struct ibv_recv_wr none = {.wr_id = 1, .num_sge = 1}, *bad = NULL;
	struct ibv_qp_init_attr qi;
	struct ibv_qp_attr qa;
	int on_qp = ibv_post_recv(qp[0], &none, &bad) != 0;
	int q = ibv_query_qp(qp[1], &qa, IBV_QP_CAP, &qi);
	printf("srq: %d posted, %d refused, post_recv on its QP refused %d, query %d srq %d\n", n, refused, on_qp, q, qi.srq == srq);
	for (int k = 0; k < n; k++)
		fake_srq_deliver(qp[k % 2], 1);
	struct ibv_wc wc[8];
	int got;
	while ((got = ibv_poll_cq(cq, 8, wc)) > 0)
		for (int i = 0; i < got; i++)
			printf("srq wc %lu qp %d status %d\n", (unsigned long)wc[i].wr_id, wc[i].qp_num == qp[1]->qp_num, wc[i].status);
	struct ibv_srq_attr at;
	int m = ibv_modify_srq(srq, &(struct ibv_srq_attr){.max_wr = 128}, IBV_SRQ_MAX_WR);
	int qs = ibv_query_srq(srq, &at);
	printf("srq resize %d query %d max_wr %u\n", m, qs, at.max_wr);
	for (int i = 0; i < 2; i++)
		if (ibv_destroy_qp(qp[i]))
			return 10;
	return ibv_destroy_srq(srq) || ibv_dereg_mr(mr) ? 10 : 0;
}

/* fill ("fill" mode): n RC QPs of 64 send WRs on one context, every one
 * queried; prints how many the program was told and the query showed
 * something else than 64 (the shim's tables fill before n). */
static int fill(struct ibv_context *ctx, struct ibv_pd *pd, int n)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp **qps = calloc(n, sizeof(*qps));
	int told = 0, shown = 0;
	for (int i = 0; cq && qps && i < n; i++) {
		struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = {.max_send_wr = 64, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
		qps[i] = ibv_create_qp(pd, &a);
		if (!qps[i])
			return 10;
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		told += a.cap.max_send_wr != 64;
		shown += ibv_query_qp(qps[i], &qa, IBV_QP_CAP, &qi) || qa.cap.max_send_wr != 64 || qi.cap.max_send_wr != 64;
	}
	printf("fill %d: told otherwise %d, shown otherwise %d\n", n, told, shown);
	for (int i = 0; qps && i < n; i++)
		if (qps[i] && ibv_destroy_qp(qps[i]))
			return 10;
	return 0;
}

/* odp ("odp" mode): registers an implicit on-demand-paging region (the
 * whole address space) and an ordinary one, and deregisters both. */
static int odp(struct ibv_pd *pd)
{
	static char buf[4096];
	struct ibv_mr *all = ibv_reg_mr_iova2(pd, NULL, SIZE_MAX, 0, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *one = ibv_reg_mr_iova2(pd, buf, sizeof(buf), (uintptr_t)buf, IBV_ACCESS_LOCAL_WRITE);
	if (!all || !one) {
		fprintf(stderr, "probe: ibv_reg_mr_iova2: %s\n", strerror(errno));
		return 10;
	}
	printf("registered %#x %#x\n", all->lkey, one->lkey);
	return ibv_dereg_mr(all) || ibv_dereg_mr(one) ? 10 : 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	int wait = argc > 2 && strcmp(argv[2], "wait") == 0;
	int event = argc > 2 && strcmp(argv[2], "event") == 0;
	/* "ex": the QP comes from ibv_create_qp_ex; "exwr" and "exinv": from
	 * ibv_create_qp_ex asking for the ibv_wr_* send API, which they post
	 * through */
	int ex = argc > 2 && strncmp(argv[2], "ex", 2) == 0;
	int exwr = argc > 2 && strcmp(argv[2], "exwr") == 0;
	int exinv = argc > 2 && strcmp(argv[2], "exinv") == 0;
	int mt = argc > 2 && strcmp(argv[2], "exwrmt") == 0;
	int wrapi = exwr || exinv || mt;
	int chan = argc > 2 && strncmp(argv[2], "chan", 4) == 0;
	int chanex = argc > 2 && strcmp(argv[2], "chanex") == 0;
	struct ibv_context *ctx = ibv_open_device(fake_device());
	if (argc > 2 && strcmp(argv[2], "cqe") == 0)
		return cq_sizes(ctx, n);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (argc > 2 && strcmp(argv[2], "sq") == 0)
		return sq_sizes(ctx, pd, n);
	if (argc > 2 && strcmp(argv[2], "odp") == 0)
		return odp(pd);
	if (argc > 2 && strcmp(argv[2], "dmabuf") == 0)
		return dmabuf(pd);
	if (argc > 2 && strcmp(argv[2], "rereg") == 0)
		return rereg(pd);
	if (argc > 2 && strcmp(argv[2], "fill") == 0)
		return fill(ctx, pd, n);
	if (argc > 2 && strcmp(argv[2], "srq") == 0)
		return srq_mode(ctx, pd, n);
	struct ibv_comp_channel *ch = NULL;
	static int cq_tag; /* the CQ's context: events must carry it */
	struct ibv_cq *cq;
	if (chan) {
		ch = ibv_create_comp_channel(ctx);
		if (!ch) {
			fprintf(stderr, "probe: ibv_create_comp_channel: %s\n", strerror(errno));
			return 10;
		}
		say_fd(ch->fd);
		signal(SIGALRM, stuck);
	}
	if (chanex) {
		struct ibv_cq_init_attr_ex ca = {.cqe = 256, .cq_context = &cq_tag, .channel = ch};
		struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
		cq = cqx ? ibv_cq_ex_to_cq(cqx) : NULL;
	} else if (argc > 2 && strcmp(argv[2], "exstart") == 0) {
		/* an extended CQ polled with ibv_start_poll */
		struct ibv_cq_init_attr_ex ca = {.cqe = 256};
		startpoll = ibv_create_cq_ex(ctx, &ca);
		cq = startpoll ? ibv_cq_ex_to_cq(startpoll) : NULL;
	} else {
		cq = ibv_create_cq(ctx, 256, chan ? &cq_tag : NULL, ch, 0);
	}
	if (!cq) {
		fprintf(stderr, "probe: create the CQ: %s\n", strerror(errno));
		return 10;
	}
	if (chan && cq->channel == NULL) {
		fprintf(stderr, "probe: the CQ has no channel\n");
		return 10;
	}
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx = NULL;
	if (ex) {
		struct ibv_qp_init_attr_ex iax = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = ia.cap, .pd = pd,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS};
		if (wrapi) {
			iax.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
			iax.cap.max_send_sge = 4;
			iax.cap.max_inline_data = 128;
		}
		if (exwr || mt)
			iax.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
					     IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
					     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
		if (exinv)
			iax.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_LOCAL_INV;
		qp = ibv_create_qp_ex(ctx, &iax);
	} else {
		qp = ibv_create_qp(pd, &ia);
	}
	if (!qp)
		return 5;
	if (wrapi) {
		qpx = ibv_qp_to_qp_ex(qp);
		if (!qpx) {
			fprintf(stderr, "probe: ibv_qp_to_qp_ex gave no struct ibv_qp_ex\n");
			return 5;
		}
		fprintf(stderr, "probe: wr_start in %s, wr_rdma_write in %s, wr_complete in %s\n", lib((void *)qpx->wr_start),
			lib((void *)qpx->wr_rdma_write), lib((void *)qpx->wr_complete));
	}
	if (probe_connect(qp))
		return 1;
	if (event) {
		/* A cable pulled and plugged; this program never reads async
		 * events. */
		fake_raise_port(IBV_EVENT_PORT_ERR, 1);
		usleep(300000);
		fake_raise_port(IBV_EVENT_PORT_ACTIVE, 1);
		usleep(300000);
	}
	int nev = 0, nblock = 0, nb_err = 0;
	if (chan) {
		int ret = ibv_req_notify_cq(cq, 0);
		if (ret) {
			fprintf(stderr, "probe: ibv_req_notify_cq: %s\n", strerror(ret));
			return 24;
		}
		if ((ret = events(qp, cq, &cq_tag, ch, n, &nev, &nblock, &nb_err)))
			return ret;
	} else if (mt) {
		long errors;
		int ret = mt_traffic(qpx, n, &errors);
		if (ret)
			return ret;
		uint64_t wrs, bytes, hash;
		fake_wire(&wrs, &bytes, &hash);
		printf("threads %d batches %ld failed %ld; wire: wrs %llu bytes %llu\n", MT_THREADS, (long)MT_THREADS * n, errors,
		       (unsigned long long)wrs, (unsigned long long)bytes);
	} else if (wrapi) {
		int ret = wr_traffic(qp, qpx, cq, n, exinv);
		if (ret)
			return ret;
	} else {
		for (int i = 0; i < n; i++) {
			int ret = post(qp, i);
			if (ret)
				return ret;
			drain(cq);
		}
	}
	/* a WR the provider refuses: the application sees the provider's error */
	int ret;
	if (mt) {
		/* the wire's order is the threads': nothing more to compare */
	} else if (wrapi) {
		int none;
		ret = wr_refused(qpx, cq, &none);
		printf("qpn %#x sends %ld recvs %ld sum %ld refused %d none_posted %d\n", qp->qp_num, sends, recvs, sum, ret, none);
		/* the queue works on */
		ibv_wr_start(qpx);
		qpx->wr_id = 0x600d;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, RKEY, RBASE);
		ibv_wr_set_sge(qpx, LKEY, (uintptr_t)payload, 32);
		ret = ibv_wr_complete(qpx);
		long before = sends;
		drain(cq);
		printf("after the refusal: complete %d, completions %ld\n", ret, sends - before);
		uint64_t wrs, bytes, hash;
		fake_wire(&wrs, &bytes, &hash);
		printf("wire: wrs %llu bytes %llu hash %016llx; completions polled: hash %016llx\n", (unsigned long long)wrs,
		       (unsigned long long)bytes, (unsigned long long)hash, (unsigned long long)polled);
	} else {
		struct ibv_send_wr bw = {.wr_id = 0xbad, .opcode = IBV_WR_RDMA_WRITE}, *bbad = NULL;
		ret = ibv_post_send(qp, &bw, &bbad);
		printf("qpn %#x sends %ld recvs %ld sum %ld refused %d bad_is_wr %d\n", qp->qp_num, sends, recvs, sum, ret, bbad == &bw);
	}
	if (chan) {
		printf("events %d (blocking %d); a non-blocking get with none pending: %s\n", nev, nblock, errname(nb_err));
		/* as libibverbs: a channel is not destroyed while a CQ uses it */
		int busy = ibv_destroy_comp_channel(ch);
		printf("destroy channel with its CQ: %s\n", busy ? errname(busy) : "destroyed");
		if (busy != EBUSY)
			return 11;
	}
	fflush(stdout);
	if (wait) {
		char line[16];
		printf("READY\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 4;
	}
	int dret = ibv_destroy_qp(qp);
	if (dret) {
		/* refused (FAKE_DESTROY_QP_BUSY): the QP is still there and works */
		int err = errno;
		long s0 = sends, r0 = recvs;
		for (int i = 0; i < 4; i++) {
			if ((ret = post(qp, n + i)))
				return ret;
			drain(cq);
		}
		printf("destroy refused: %s, errno %s; then %ld sends %ld recvs\n", errname(dret), errname(err), sends - s0, recvs - r0);
		dret = ibv_destroy_qp(qp);
		printf("destroyed on the second try: %d\n", dret);
	}
	int ret_cq = ibv_destroy_cq(cq);
	if (ret_cq) {
		printf("ibv_destroy_cq: %s\n", strerror(ret_cq));
		return 14;
	}
	if (ch) {
		int ret_ch = ibv_destroy_comp_channel(ch);
		if (ret_ch) {
			printf("ibv_destroy_comp_channel: %s\n", strerror(ret_ch));
			return 15;
		}
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("done\n");
	return 0;
}
