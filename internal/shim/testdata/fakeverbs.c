/* A stand-in libibverbs.so.1 for testing the shim on a host without RDMA:
 * one device with two Ethernet ports, RC QPs whose provider completes
 * every work request at once (sends into the send CQ, receives matched
 * against sends of the peer QP in the same process). It exports the
 * IBVERBS_1.1 symbols the shim forwards to, and fake_device() for the
 * probe program.
 *
 * Completion channels work as libibverbs and the kernel make them: the
 * channel's fd is the read end of a pipe (blocking, as the uverbs event
 * file); a CQ armed by req_notify_cq writes one event (the CQ's address,
 * as struct ib_uverbs_comp_event_desc) when its next completion arrives;
 * ibv_destroy_cq compares the acknowledged events with the reported ones
 * (where libibverbs would wait forever, it says so and fails with EIO). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CQ_DEPTH 4096

struct fake_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx; /* from create_cq_ex: the same leading fields */
	};
	struct ibv_wc wc[CQ_DEPTH];
	unsigned head, tail;
	int armed;         /* req_notify_cq since the last event (under cq.mutex) */
	uint32_t reported; /* events written to the channel (under cq.mutex) */
};

struct fake_chan {
	struct ibv_comp_channel ch; /* fd: the pipe's read end */
	int wfd;
};

/* channels' refcnt (the real one takes the context's mutex) */
static pthread_mutex_t chan_mu = PTHREAD_MUTEX_INITIALIZER;

static struct ibv_device fake_dev;
static uint32_t next_qpn = 0x100;

/* Every open context gets a pipe as its async fd; fake_raise_port
 * writes a port event into all of them, as the kernel does. */
#define MAX_CTX 16
static struct ibv_context *open_ctxs[MAX_CTX];
static int write_fds[MAX_CTX];

struct fake_event {
	int type;
	int port;
};

struct ibv_device *fake_device(void)
{
	strcpy(fake_dev.name, "fake0");
	return &fake_dev;
}

void fake_raise_port(int type, int port)
{
	struct fake_event e = {type, port};
	for (int i = 0; i < MAX_CTX; i++)
		if (open_ctxs[i] && write(write_fds[i], &e, sizeof(e)) != sizeof(e))
			abort();
}

static struct ibv_device *dev_list[2];

struct ibv_device **ibv_get_device_list(int *n)
{
	dev_list[0] = fake_device();
	dev_list[1] = NULL;
	if (n)
		*n = 1;
	return dev_list;
}

void ibv_free_device_list(struct ibv_device **l) {}

const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

static void push(struct fake_cq *c, uint64_t wr_id, uint32_t qpn, enum ibv_wc_opcode op, enum ibv_wc_status st)
{
	struct ibv_wc *w = &c->wc[c->head++ % CQ_DEPTH];
	memset(w, 0, sizeof(*w));
	w->wr_id = wr_id;
	w->qp_num = qpn;
	w->opcode = op;
	w->status = st;
	/* an armed CQ gets one event for its next completion, as the kernel's */
	pthread_mutex_lock(&c->cq.mutex);
	if (c->armed && c->cq.channel) {
		uint64_t ev = (uintptr_t)&c->cq;
		if (write(((struct fake_chan *)c->cq.channel)->wfd, &ev, sizeof(ev)) != sizeof(ev))
			abort();
		c->reported++;
		c->armed = 0;
	}
	pthread_mutex_unlock(&c->cq.mutex);
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	pthread_mutex_lock(&cq->mutex);
	c->armed = 1;
	pthread_mutex_unlock(&cq->mutex);
	return 0;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	for (; wr; wr = wr->next) {
		if (wr->wr_id == 0xbad) { /* the test's way to make the provider refuse a WR */
			*bad = wr;
			return ENOMEM;
		}
		if (wr->send_flags & IBV_SEND_SIGNALED)
			push((struct fake_cq *)qp->send_cq, wr->wr_id, qp->qp_num, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS);
	}
	return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next)
		push((struct fake_cq *)qp->recv_cq, wr->wr_id, qp->qp_num, IBV_WC_RECV, IBV_WC_SUCCESS);
	return 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	int i = 0;
	for (; i < n && c->tail != c->head; i++)
		wc[i] = c->wc[c->tail++ % CQ_DEPTH];
	return i;
}

static struct ibv_qp *fake_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	return ibv_create_qp(attr->pd, (struct ibv_qp_init_attr *)attr);
}

/* new_cq is the provider's create_cq and libibverbs's verbs_init_cq. */
static struct fake_cq *new_cq(struct ibv_context *ctx, int cqe, void *cq_ctx, struct ibv_comp_channel *ch)
{
	struct fake_cq *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->cq.context = ctx;
	c->cq.cqe = cqe;
	c->cq.cq_context = cq_ctx;
	c->cq.channel = ch;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	if (ch) {
		pthread_mutex_lock(&chan_mu);
		ch->refcnt++;
		pthread_mutex_unlock(&chan_mu);
	}
	return c;
}

static struct ibv_cq_ex *fake_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	struct fake_cq *c = new_cq(ctx, attr->cqe, attr->cq_context, attr->channel);
	return c ? &c->cqx : NULL;
}

/* Contexts are verbs_contexts, as rdma-core's providers make them, so the
 * inline ibv_create_qp_ex and ibv_create_cq_ex find create_qp_ex and
 * create_cq_ex. */
struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	struct verbs_context *v = calloc(1, sizeof(*v));
	struct ibv_context *ctx = &v->context;
	v->sz = sizeof(*v);
	v->create_qp_ex = fake_create_qp_ex;
	v->create_cq_ex = fake_create_cq_ex;
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->device = dev;
	int p[2];
	if (pipe(p))
		return NULL;
	ctx->async_fd = p[0];
	for (int i = 0; i < MAX_CTX; i++)
		if (!open_ctxs[i]) {
			open_ctxs[i] = ctx;
			write_fds[i] = p[1];
			break;
		}
	ctx->ops.post_send = fake_post_send;
	ctx->ops.post_recv = fake_post_recv;
	ctx->ops.poll_cq = fake_poll_cq;
	ctx->ops.req_notify_cq = fake_req_notify_cq;
	return ctx;
}

int ibv_close_device(struct ibv_context *ctx)
{
	for (int i = 0; i < MAX_CTX; i++)
		if (open_ctxs[i] == ctx) {
			open_ctxs[i] = NULL;
			close(write_fds[i]);
		}
	close(ctx->async_fd);
	free(verbs_get_ctx(ctx));
	return 0;
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->phys_port_cnt = 2;
	return 0;
}

#undef ibv_query_port
int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *a)
{
	struct ibv_port_attr *p = (struct ibv_port_attr *)a;
	if (port < 1 || port > 2)
		return EINVAL;
	p->state = IBV_PORT_ACTIVE;
	p->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	pd->context = ctx;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx, struct ibv_comp_channel *ch, int vec)
{
	struct fake_cq *c = new_cq(ctx, cqe, cq_ctx, ch);
	return c ? &c->cq : NULL;
}

/* libibverbs waits until every event the kernel reported is acknowledged:
 * a program (or shim) that miscounts would hang there. */
int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	struct ibv_comp_channel *ch = cq->channel;
	pthread_mutex_lock(&cq->mutex);
	uint32_t acked = cq->comp_events_completed, reported = c->reported;
	pthread_mutex_unlock(&cq->mutex);
	if (acked != reported) {
		fprintf(stderr, "fakeverbs: ibv_destroy_cq: %u events acknowledged, %u reported: libibverbs would wait forever\n",
			acked, reported);
		return EIO;
	}
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(c);
	if (ch) {
		pthread_mutex_lock(&chan_mu);
		ch->refcnt--;
		pthread_mutex_unlock(&chan_mu);
	}
	return 0;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct fake_chan *c = calloc(1, sizeof(*c));
	int p[2];
	if (!c)
		return NULL;
	if (pipe2(p, O_CLOEXEC)) {
		int err = errno;
		free(c);
		errno = err;
		return NULL;
	}
	c->ch.context = ctx;
	c->ch.fd = p[0];
	c->wfd = p[1];
	return &c->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	struct fake_chan *c = (struct fake_chan *)ch;
	pthread_mutex_lock(&chan_mu);
	int busy = ch->refcnt != 0;
	pthread_mutex_unlock(&chan_mu);
	if (busy)
		return EBUSY;
	close(ch->fd);
	close(c->wfd);
	free(c);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx)
{
	uint64_t ev;
	if (read(ch->fd, &ev, sizeof(ev)) != sizeof(ev))
		return -1;
	*cq = (struct ibv_cq *)(uintptr_t)ev;
	*cq_ctx = (*cq)->cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += n;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp *qp = calloc(1, sizeof(*qp));
	qp->context = pd->context;
	qp->pd = pd;
	qp->send_cq = attr->send_cq;
	qp->recv_cq = attr->recv_cq;
	qp->qp_num = next_qpn++;
	qp->qp_type = attr->qp_type;
	qp->state = IBV_QPS_RESET;
	return qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	if (mask & IBV_QP_ALT_PATH)
		return EINVAL; /* as ib_core on RoCE */
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp) { free(qp); return 0; }

int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct fake_event e;
	ssize_t n = read(ctx->async_fd, &e, sizeof(e));
	if (n != sizeof(e)) {
		if (n >= 0)
			errno = EIO;
		return -1;
	}
	memset(ev, 0, sizeof(*ev));
	ev->event_type = e.type;
	ev->element.port_num = e.port;
	return 0;
}
void ibv_ack_async_event(struct ibv_async_event *ev) {}

/* Stubs of the other verbs the shim's own code links against (verbs/ibv):
 * the stand-in does not implement them. */
int ibv_dereg_mr(struct ibv_mr *mr) { return ENOSYS; }
__be64 ibv_get_device_guid(struct ibv_device *d) { return 0; }
int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid) { memset(gid, 0, sizeof(*gid)); return 0; }
int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *ia) { return ENOSYS; }
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access) { errno = ENOSYS; return NULL; }
int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e, uint32_t flags, size_t size) { return ENOSYS; }
