/* lab/nccl/nccl_pattern.c: a verbs program in the shape of NCCL's IB
 * transport, checking its own data.
 *
 * Like NCCL before 2.30 it is not linked with libibverbs: it opens
 * libibverbs.so.1 with dlopen and resolves every verb with dlvsym at
 * IBVERBS_1.1 (ibvsymbols); posts and polls are the inline calls through
 * the context's operations, as NCCL's. Like NCCL's net_ib each process has
 * a send connection and a receive connection to its peer (one RC QP each),
 * and moves data in the shape of the Simple protocol: the receiver writes
 * the address, key and size of a free slot of its buffer into the sender's
 * FIFO with an inline RDMA WRITE (clear to send); the sender, seeing the
 * FIFO entry of the next step, RDMA WRITEs the step's data there and
 * signals it with an RDMA WRITE WITH IMM (the step number in the immediate)
 * that consumes a receive; the receiver checks every byte and frees the
 * slot. Both ends of a QP write to each other: data one way, FIFO entries
 * the other. An async-event thread ends the process on the events NCCL
 * treats as fatal (DEVICE_FATAL, CQ_ERR, QP_FATAL, QP_REQ_ERR,
 * QP_ACCESS_ERR), as NCCL's async thread ends the communicator; a
 * completion with an error ends it as NCCL's "Got completion with error".
 *
 * usage: nccl_pattern [-d DEV] [-g GIDX] [-p PORT] [-D SECONDS] [-b BYTES]
 *                     [-T STALL_S] [HOST]
 *   without HOST it listens on PORT (TCP, for the connection details);
 *   the side with HOST connects. Each side sends for SECONDS (4), BYTES
 *   (32768) a step, 8 slots, then an end step; both exit once they sent
 *   and received everything. Prints "NCCL_PATTERN traffic started" after
 *   the first step each way, and at the end
 *   NCCL_PATTERN sent=N received=N bytes=N bad=N elapsed_s=.. max_gap_ms=.. MBps=..
 *   NCCL_IB_RETRY_CNT (0 to 7, as NCCL's; default 7) is the QPs' retry_cnt,
 *   NCCL_IB_TIMEOUT (1 to 31; default 20 as current NCCL's, older releases
 *   had 18 and, before that, 14) their local ACK timeout, 4.096 us * 2^N.
 * exit status: 0 when every byte of every step arrived intact; 1 usage or
 * setup; 2 a completion with an error; 3 no progress for STALL_S (60);
 * 4 bad data; abort() (134) on a fatal async event. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define SLOTS 8
#define END_BIT 0x80000000u
#define V "IBVERBS_1.1"

/* the verbs, resolved as NCCL's ibvsymbols does */
static struct {
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	const char *(*get_device_name)(struct ibv_device *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	int (*dealloc_pd)(struct ibv_pd *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	int (*dereg_mr)(struct ibv_mr *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
	int (*destroy_cq)(struct ibv_cq *);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	int (*destroy_qp)(struct ibv_qp *);
	int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	int (*get_async_event)(struct ibv_context *, struct ibv_async_event *);
	void (*ack_async_event)(struct ibv_async_event *);
	const char *(*event_type_str)(enum ibv_event_type);
	const char *(*wc_status_str)(enum ibv_wc_status);
} ibv;

static void die(const char *what)
{
	fprintf(stderr, "nccl_pattern: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void load_verbs(void)
{
	void *h = dlopen("libibverbs.so", RTLD_NOW);
	if (!h)
		h = dlopen("libibverbs.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "nccl_pattern: dlopen libibverbs: %s\n", dlerror());
		exit(1);
	}
#define SYM(f, name)                                                                   \
	do {                                                                           \
		*(void **)&ibv.f = dlvsym(h, name, V);                                 \
		if (!ibv.f) {                                                          \
			fprintf(stderr, "nccl_pattern: dlvsym %s@%s: %s\n", name, V, dlerror()); \
			exit(1);                                                       \
		}                                                                      \
	} while (0)
	SYM(get_device_list, "ibv_get_device_list");
	SYM(free_device_list, "ibv_free_device_list");
	SYM(get_device_name, "ibv_get_device_name");
	SYM(open_device, "ibv_open_device");
	SYM(close_device, "ibv_close_device");
	SYM(alloc_pd, "ibv_alloc_pd");
	SYM(dealloc_pd, "ibv_dealloc_pd");
	SYM(reg_mr, "ibv_reg_mr");
	SYM(dereg_mr, "ibv_dereg_mr");
	SYM(create_cq, "ibv_create_cq");
	SYM(destroy_cq, "ibv_destroy_cq");
	SYM(create_qp, "ibv_create_qp");
	SYM(modify_qp, "ibv_modify_qp");
	SYM(destroy_qp, "ibv_destroy_qp");
	SYM(query_port, "ibv_query_port");
	SYM(query_gid, "ibv_query_gid");
	SYM(get_async_event, "ibv_get_async_event");
	SYM(ack_async_event, "ibv_ack_async_event");
	SYM(event_type_str, "ibv_event_type_str");
	SYM(wc_status_str, "ibv_wc_status_str");
#undef SYM
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static unsigned char pattern(int dir, uint32_t step, size_t off)
{
	return (unsigned char)(dir * 101 + step * 7 + off * 13 + (off >> 8));
}

/* what the receiver writes into the sender's FIFO (NCCL's ncclIbSendFifo) */
struct fifo_entry {
	uint64_t addr;
	uint32_t rkey;
	uint32_t size;
	uint64_t seq; /* step + 1: the entry of that step is there */
	uint64_t pad;
};

/* one side's connection details, exchanged over TCP */
struct wire {
	uint32_t send_qpn, recv_qpn, send_psn, recv_psn;
	uint64_t fifo_addr; /* the sender's FIFO (send connection) */
	uint32_t fifo_rkey;
	uint16_t lid;
	uint8_t gid[16];
};

static struct ibv_context *ctx;
static int retry_cnt = 7; /* NCCL_IB_RETRY_CNT */
static int ack_timeout = 20; /* NCCL_IB_TIMEOUT */

/* the async thread: NCCL's ncclIbAsyncThreadMain ends on these */
static void *async_thread(void *arg)
{
	(void)arg;
	for (;;) {
		struct ibv_async_event e;
		if (ibv.get_async_event(ctx, &e))
			return NULL;
		enum ibv_event_type t = e.event_type;
		const char *s = ibv.event_type_str(t);
		ibv.ack_async_event(&e);
		switch (t) {
		case IBV_EVENT_DEVICE_FATAL:
		case IBV_EVENT_CQ_ERR:
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
			fprintf(stderr, "nccl_pattern: async fatal event: %s\n", s);
			fflush(NULL);
			abort();
		default:
			fprintf(stderr, "nccl_pattern: async event: %s\n", s);
		}
	}
}

static int tcp_connect(const char *host, int port, int listen_only)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = listen_only ? AI_PASSIVE : 0}, *res;
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	if (getaddrinfo(host, ps, &hints, &res))
		die("getaddrinfo");
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (s < 0)
		die("socket");
	if (listen_only) {
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(s, res->ai_addr, res->ai_addrlen) || listen(s, 1))
			die("bind/listen");
		printf("nccl_pattern: listening on port %d\n", port);
		fflush(stdout);
		int c = accept(s, NULL, NULL);
		if (c < 0)
			die("accept");
		close(s);
		s = c;
	} else {
		int tries = 0;
		while (connect(s, res->ai_addr, res->ai_addrlen)) {
			if (++tries > 100)
				die("connect");
			usleep(100000);
		}
	}
	freeaddrinfo(res);
	return s;
}

static void xfer(int s, void *out, void *in, size_t n)
{
	if (write(s, out, n) != (ssize_t)n)
		die("write to peer");
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(s, (char *)in + got, n - got);
		if (r <= 0)
			die("read from peer");
		got += r;
	}
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1,
			.max_inline_data = sizeof(struct fifo_entry)}};
	struct ibv_qp *qp = ibv.create_qp(pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
	if (ibv.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("ibv_modify_qp INIT");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t my_psn, uint32_t qpn, uint32_t psn, const struct wire *w, int gidx)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qpn, .rq_psn = psn,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = {.dlid = w->lid, .port_num = 1}};
	if (gidx >= 0) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.hop_limit = 1;
		a.ah_attr.grh.sgid_index = gidx;
		memcpy(a.ah_attr.grh.dgid.raw, w->gid, 16);
	}
	if (ibv.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
	                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("ibv_modify_qp RTR");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = ack_timeout;
	a.retry_cnt = retry_cnt;
	a.rnr_retry = 7;
	a.sq_psn = my_psn;
	a.max_rd_atomic = 1;
	if (ibv.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
	                              IBV_QP_MAX_QP_RD_ATOMIC))
		die("ibv_modify_qp RTS");
}

static void wc_fail(const struct ibv_wc *wc, const char *conn)
{
	fprintf(stderr, "nccl_pattern: completion with error on the %s connection: %s (wr_id %llu)\n", conn,
	        ibv.wc_status_str(wc->status), (unsigned long long)wc->wr_id);
	fflush(NULL);
	exit(2);
}

/* env_int sets *v from the environment variable name when it is set:
 * a whole number from lo to hi, else it says so and returns -1. */
static int env_int(const char *name, long lo, long hi, int *v)
{
	const char *s = getenv(name);
	if (!s)
		return 0;
	char *end;
	long n = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || n < lo || n > hi) {
		fprintf(stderr, "nccl_pattern: %s=%s: want %ld to %ld\n", name, s, lo, hi);
		return -1;
	}
	*v = (int)n;
	return 0;
}

int main(int argc, char **argv)
{
	const char *dev = NULL, *host = NULL;
	int gidx = -1, port = 18515, opt;
	double seconds = 4, stall = 60;
	size_t bytes = 32768;
	while ((opt = getopt(argc, argv, "d:g:p:D:b:T:")) != -1) {
		switch (opt) {
		case 'd': dev = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 'D': seconds = atof(optarg); break;
		case 'b': bytes = strtoul(optarg, NULL, 0); break;
		case 'T': stall = atof(optarg); break;
		default:
			fprintf(stderr, "usage: nccl_pattern [-d DEV] [-g GIDX] [-p PORT] [-D SECONDS] [-b BYTES] [-T STALL_S] [HOST]\n");
			return 1;
		}
	}
	if (optind < argc)
		host = argv[optind];
	if (bytes == 0 || bytes > (64u << 20) || seconds <= 0 || stall <= 0) {
		fprintf(stderr, "nccl_pattern: -b must be 1 to 64 MiB, -D and -T positive\n");
		return 1;
	}
	if (env_int("NCCL_IB_RETRY_CNT", 0, 7, &retry_cnt) || env_int("NCCL_IB_TIMEOUT", 1, 31, &ack_timeout))
		return 1;
	load_verbs();
	struct ibv_device **l = ibv.get_device_list(NULL);
	struct ibv_device *d = NULL;
	for (int i = 0; l && l[i]; i++)
		if (!dev || !strcmp(ibv.get_device_name(l[i]), dev))
			d = d ? d : l[i];
	if (!d) {
		fprintf(stderr, "nccl_pattern: device %s not found\n", dev ? dev : "(any)");
		return 1;
	}
	ctx = ibv.open_device(d);
	if (!ctx)
		die("ibv_open_device");
	pthread_t at;
	if (pthread_create(&at, NULL, async_thread, NULL))
		die("pthread_create");
	pthread_detach(at);
	struct ibv_pd *pd = ibv.alloc_pd(ctx);
	struct ibv_cq *scq = pd ? ibv.create_cq(ctx, 256, NULL, NULL, 0) : NULL;
	struct ibv_cq *rcq = scq ? ibv.create_cq(ctx, 256, NULL, NULL, 0) : NULL;
	if (!rcq)
		die("PD or CQs");
	/* send connection: source slots and the FIFO the peer writes into;
	 * receive connection: destination slots and the entries it posts */
	unsigned char *sbuf = calloc(SLOTS, bytes), *rbuf = calloc(SLOTS, bytes), *want = malloc(bytes);
	struct fifo_entry *fifo = calloc(SLOTS, sizeof *fifo), *post = calloc(SLOTS, sizeof *post);
	if (!sbuf || !rbuf || !want || !fifo || !post)
		die("calloc");
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *smr = ibv.reg_mr(pd, sbuf, SLOTS * bytes, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv.reg_mr(pd, rbuf, SLOTS * bytes, acc);
	struct ibv_mr *fmr = ibv.reg_mr(pd, fifo, SLOTS * sizeof *fifo, acc);
	if (!smr || !rmr || !fmr)
		die("ibv_reg_mr");
	struct ibv_qp *sqp = make_qp(pd, scq), *rqp = make_qp(pd, rcq);

	struct ibv_port_attr pa;
	if (ibv.query_port(ctx, 1, &pa))
		die("ibv_query_port");
	srand48(getpid() * time(NULL));
	struct wire me = {.send_qpn = sqp->qp_num, .recv_qpn = rqp->qp_num, .send_psn = lrand48() & 0xffffff,
		.recv_psn = lrand48() & 0xffffff, .fifo_addr = (uintptr_t)fifo, .fifo_rkey = fmr->rkey, .lid = pa.lid}, peer;
	if (gidx >= 0) {
		union ibv_gid g;
		if (ibv.query_gid(ctx, 1, gidx, &g))
			die("ibv_query_gid");
		memcpy(me.gid, g.raw, 16);
	}
	int sock = tcp_connect(host ? host : "0.0.0.0", port, host == NULL);
	xfer(sock, &me, &peer, sizeof me);
	/* my send QP talks to the peer's receive QP, and the other way */
	connect_qp(sqp, me.send_psn, peer.recv_qpn, peer.recv_psn, &peer, gidx);
	connect_qp(rqp, me.recv_psn, peer.send_qpn, peer.send_psn, &peer, gidx);
	char c = 'r', pc;
	xfer(sock, &c, &pc, 1); /* both ready to receive */

	uint32_t sstep = 0, sdone = 0, rstep = 0, rposted = 0;
	int send_end = 0, send_end_done = 0, recv_end = 0, started = 0;
	long bad = 0, fifo_out = 0;
	long long moved = 0;
	double t0 = now(), last = t0, gap = 0, progress = t0;
	struct ibv_wc wc[16];
	while (!(send_end_done && recv_end && fifo_out == 0)) {
		double t = now();
		/* receive side: clear to send for every free slot */
		while (!recv_end && rposted < rstep + SLOTS) {
			uint32_t slot = rposted % SLOTS;
			struct ibv_recv_wr rw = {.wr_id = rposted}, *rbad;
			if (ibv_post_recv(rqp, &rw, &rbad))
				die("ibv_post_recv");
			post[slot] = (struct fifo_entry){.addr = (uintptr_t)(rbuf + slot * bytes), .rkey = rmr->rkey,
				.size = (uint32_t)bytes, .seq = rposted + 1ull};
			struct ibv_sge sg = {.addr = (uintptr_t)&post[slot], .length = sizeof post[slot]};
			struct ibv_send_wr fw = {.wr_id = rposted, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
				.wr.rdma = {.remote_addr = peer.fifo_addr + slot * sizeof(struct fifo_entry), .rkey = peer.fifo_rkey}};
			struct ibv_send_wr *fbad;
			if (ibv_post_send(rqp, &fw, &fbad))
				die("ibv_post_send (FIFO)");
			fifo_out++;
			rposted++;
		}
		/* send side: the next step once its FIFO entry is there and its
		 * slot's previous data completed */
		volatile struct fifo_entry *fe = &fifo[sstep % SLOTS];
		if (!send_end && sstep < sdone + SLOTS && fe->seq == sstep + 1ull) {
			uint32_t slot = sstep % SLOTS;
			int last_step = t - t0 >= seconds;
			size_t n = last_step ? 0 : bytes;
			if (n > fe->size) {
				fprintf(stderr, "nccl_pattern: the peer offers %u bytes, want %zu\n", fe->size, n);
				return 4;
			}
			unsigned char *src = sbuf + slot * bytes;
			for (size_t o = 0; o < n; o++)
				src[o] = pattern(host != NULL, sstep, o);
			struct ibv_sge sg = {.addr = (uintptr_t)src, .length = (uint32_t)n, .lkey = smr->lkey};
			struct ibv_send_wr imm = {.wr_id = sstep, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				.imm_data = htonl(sstep | (last_step ? END_BIT : 0)),
				.wr.rdma = {.remote_addr = fe->addr, .rkey = fe->rkey}};
			struct ibv_send_wr data = {.wr_id = sstep, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				.next = &imm, .wr.rdma = {.remote_addr = fe->addr, .rkey = fe->rkey}};
			struct ibv_send_wr *sbad;
			if (ibv_post_send(sqp, n ? &data : &imm, &sbad))
				die("ibv_post_send (data)");
			moved += n;
			send_end = last_step;
			sstep++;
		}
		int k = ibv_poll_cq(scq, 16, wc);
		if (k < 0)
			die("ibv_poll_cq");
		for (int i = 0; i < k; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				wc_fail(&wc[i], "send");
			sdone = (uint32_t)wc[i].wr_id + 1;
			if (send_end && sdone == sstep)
				send_end_done = 1;
			progress = t;
		}
		k = ibv_poll_cq(rcq, 16, wc);
		if (k < 0)
			die("ibv_poll_cq");
		for (int i = 0; i < k; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				wc_fail(&wc[i], "receive");
			progress = t;
			if (wc[i].opcode == IBV_WC_RDMA_WRITE) {
				fifo_out--;
				continue;
			}
			uint32_t imm = ntohl(wc[i].imm_data), step = imm & ~END_BIT;
			if (wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM || step != rstep) {
				fprintf(stderr, "nccl_pattern: step %u arrived (opcode %d), want %u\n", step, wc[i].opcode, rstep);
				return 4;
			}
			if (imm & END_BIT) {
				recv_end = 1;
			} else {
				unsigned char *got = rbuf + (rstep % SLOTS) * bytes;
				for (size_t o = 0; o < bytes; o++)
					want[o] = pattern(host == NULL, rstep, o);
				if (memcmp(got, want, bytes)) {
					for (size_t o = 0; o < bytes; o++)
						bad += got[o] != want[o];
					fprintf(stderr, "nccl_pattern: step %u: bad bytes\n", rstep);
				}
				memset(got, 0, bytes);
			}
			if (t - last > gap && rstep > 0)
				gap = t - last;
			last = t;
			rstep++;
		}
		if (!started && sdone > 0 && rstep > 0) {
			started = 1;
			printf("NCCL_PATTERN traffic started\n");
			fflush(stdout);
		}
		if (t - progress > stall) {
			fprintf(stderr, "nccl_pattern: no progress for %.0f s (sent %u of %u, received %u)\n", stall, sdone, sstep, rstep);
			return 3;
		}
	}
	double el = now() - t0;
	xfer(sock, &c, &pc, 1); /* the peer is done with my memory too */
	printf("NCCL_PATTERN sent=%u received=%u bytes=%lld bad=%ld elapsed_s=%.2f max_gap_ms=%.1f MBps=%.2f\n", sstep, rstep,
	       moved, bad, el, gap * 1e3, moved / el / 1e6);
	fflush(stdout);
	if (ibv.destroy_qp(sqp) || ibv.destroy_qp(rqp) || ibv.dereg_mr(smr) || ibv.dereg_mr(rmr) || ibv.dereg_mr(fmr) ||
	    ibv.destroy_cq(scq) || ibv.destroy_cq(rcq) || ibv.dealloc_pd(pd))
		die("teardown");
	ibv.free_device_list(l);
	return bad ? 4 : 0;
}
