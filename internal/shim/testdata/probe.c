/* An RDMA program that knows nothing of ibpath: opens the device, makes an
 * RC QP, connects it, posts and polls work, prints what it saw. With
 * "wait" it stops before destroying the QP until a line arrives on stdin.
 * With "chan" ("chanex": the CQ from ibv_create_cq_ex) it waits for its
 * completions on a completion channel: poll(2) on the channel's fd, or
 * for every 50th post a blocking ibv_get_cq_event while another thread
 * posts; at the end a get on the fd made non-blocking, with nothing
 * pending. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

struct ibv_device *fake_device(void);
void fake_raise_port(int type, int port);

#define EVENT_TIMEOUT_MS 5000

static long sends, recvs, sum;

static void drain(struct ibv_cq *cq)
{
	struct ibv_wc wc[16];
	int got;
	while ((got = ibv_poll_cq(cq, 16, wc)) > 0)
		for (int k = 0; k < got; k++) {
			if (wc[k].opcode & IBV_WC_RECV)
				recvs++;
			else
				sends++;
			sum += wc[k].wr_id;
		}
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

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	int wait = argc > 2 && strcmp(argv[2], "wait") == 0;
	int event = argc > 2 && strcmp(argv[2], "event") == 0;
	/* "ex": the QP comes from ibv_create_qp_ex; "exwr": from
	 * ibv_create_qp_ex asking for the ibv_wr_* send API */
	int ex = argc > 2 && strncmp(argv[2], "ex", 2) == 0;
	int exwr = argc > 2 && strcmp(argv[2], "exwr") == 0;
	int chan = argc > 2 && strncmp(argv[2], "chan", 4) == 0;
	int chanex = argc > 2 && strcmp(argv[2], "chanex") == 0;
	struct ibv_context *ctx = ibv_open_device(fake_device());
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
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
	if (ex) {
		struct ibv_qp_init_attr_ex iax = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = ia.cap, .pd = pd,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS};
		if (exwr) {
			iax.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
			iax.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
		}
		qp = ibv_create_qp_ex(ctx, &iax);
	} else {
		qp = ibv_create_qp(pd, &ia);
	}
	if (!qp)
		return 5;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return 1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.dest_qp_num = 0x4242;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid.raw[10] = 0xff;
	a.ah_attr.grh.dgid.raw[11] = 0xff;
	a.ah_attr.grh.dgid.raw[12] = 10;
	a.ah_attr.grh.dgid.raw[15] = 2;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return 1;
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
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
	} else {
		for (int i = 0; i < n; i++) {
			int ret = post(qp, i);
			if (ret)
				return ret;
			drain(cq);
		}
	}
	/* a WR the provider refuses: the application sees the provider's error */
	struct ibv_send_wr bw = {.wr_id = 0xbad, .opcode = IBV_WR_RDMA_WRITE}, *bbad = NULL;
	int ret = ibv_post_send(qp, &bw, &bbad);
	printf("qpn %#x sends %ld recvs %ld sum %ld refused %d bad_is_wr %d\n", qp->qp_num, sends, recvs, sum, ret, bbad == &bw);
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
	ibv_destroy_qp(qp);
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
