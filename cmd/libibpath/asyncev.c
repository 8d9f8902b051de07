/* The filter of the application's async events: see asyncev.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "asyncev.h"

int lip_async_keepable(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_DEVICE_FATAL:
		return 1;
	default:
		return 0;
	}
}

/* What a context holds of given-back events: the eventfd that wakes a
 * wait (-1 before the filter kept anything of it), the events waiting
 * for the application, those handed out and not acknowledged yet. */
#define LIP_ASYNC_CTXS 64
struct back {
	struct ibv_context *ctx;
	int wake_fd;
	int n, nout;
	struct ibv_async_event q[LIP_ASYNC_BACK], out[LIP_ASYNC_BACK];
};
static struct back backs[LIP_ASYNC_CTXS];
static pthread_mutex_t backs_mu = PTHREAD_MUTEX_INITIALIZER;

/* back_of is ctx's entry, made when make is set (NULL: none, or no room);
 * backs_mu held */
static struct back *back_of(struct ibv_context *ctx, int make)
{
	struct back *free_b = NULL;
	for (int i = 0; i < LIP_ASYNC_CTXS; i++) {
		if (backs[i].ctx == ctx)
			return &backs[i];
		if (!backs[i].ctx && !free_b)
			free_b = &backs[i];
	}
	if (!make || !free_b)
		return NULL;
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	memset(free_b, 0, sizeof(*free_b));
	free_b->ctx = ctx, free_b->wake_fd = fd;
	return free_b;
}

/* take hands out the oldest given-back event of ctx into ev: 1, or 0 */
static int take(struct ibv_context *ctx, struct ibv_async_event *ev, int *wake_fd)
{
	int got = 0;
	pthread_mutex_lock(&backs_mu);
	struct back *b = back_of(ctx, 0);
	*wake_fd = b ? b->wake_fd : -1;
	if (b && b->n > 0 && (b->q[0].event_type == IBV_EVENT_DEVICE_FATAL || b->nout < LIP_ASYNC_BACK)) {
		*ev = b->q[0];
		memmove(&b->q[0], &b->q[1], (size_t)(b->n - 1) * sizeof(b->q[0]));
		b->n--;
		if (ev->event_type != IBV_EVENT_DEVICE_FATAL) /* (its acknowledgement counts nothing) */
			b->out[b->nout++] = *ev;
		got = 1;
	}
	pthread_mutex_unlock(&backs_mu);
	return got;
}

/* wait blocks until fd has an event or wake_fd a give-back: 0 (get),
 * 1 (take again). An interrupted wait is resumed, as libibverbs' read
 * is under SA_RESTART: NCCL's async thread ends on any error. */
static int wait_either(int fd, int wake_fd)
{
	struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = wake_fd, .events = POLLIN}};
	for (;;) {
		int r = poll(p, 2, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return 0; /* the get reports what is wrong with the fd */
		if (p[1].revents & POLLIN) {
			uint64_t v;
			if (read(wake_fd, &v, sizeof(v)) < 0) {
				/* (EAGAIN: another waiter read it) */
			}
			return 1;
		}
		return 0;
	}
}

/* armed marks ctx as one whose waits wake for give-backs (its first
 * kept event). */
static void armed(struct ibv_context *ctx)
{
	pthread_mutex_lock(&backs_mu);
	(void)back_of(ctx, 1);
	pthread_mutex_unlock(&backs_mu);
}

int lip_async_filter(struct ibv_context *ctx, struct ibv_async_event *ev, const struct lip_async_ops *ops)
{
	for (;;) {
		int wake_fd;
		if (take(ctx, ev, &wake_fd))
			return 0;
		if (wake_fd >= 0) {
			int fl = fcntl(ctx->async_fd, F_GETFL);
			if (fl >= 0 && !(fl & O_NONBLOCK) && wait_either(ctx->async_fd, wake_fd))
				continue;
		}
		int ret = ops->get(ctx, ev);
		if (ret)
			return ret;
		if (!ops->keep(ctx, ev))
			return 0;
		/* kept: acknowledged here, or ibv_destroy_qp would wait for it */
		ops->ack(ev);
		armed(ctx);
	}
}

int lip_async_give(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_event_type type)
{
	pthread_mutex_lock(&backs_mu);
	struct back *b = back_of(ctx, 1);
	if (!b || b->n == LIP_ASYNC_BACK) {
		pthread_mutex_unlock(&backs_mu);
		errno = b ? ENOSPC : ENOMEM;
		return -1;
	}
	struct ibv_async_event *e = &b->q[b->n++];
	memset(e, 0, sizeof(*e));
	e->event_type = type;
	if (qp)
		e->element.qp = qp;
	int fd = b->wake_fd;
	pthread_mutex_unlock(&backs_mu);
	uint64_t one = 1;
	if (write(fd, &one, sizeof(one)) < 0) {
		/* (EAGAIN: the counter is full, a wake is pending anyway) */
	}
	return 0;
}

int lip_async_acked(const struct ibv_async_event *ev)
{
	int mine = 0;
	pthread_mutex_lock(&backs_mu);
	for (int i = 0; i < LIP_ASYNC_CTXS && !mine; i++) {
		struct back *b = &backs[i];
		for (int j = 0; b->ctx && j < b->nout; j++) {
			if (b->out[j].event_type == ev->event_type && b->out[j].element.qp == ev->element.qp) {
				b->out[j] = b->out[--b->nout];
				mine = 1;
				break;
			}
		}
	}
	pthread_mutex_unlock(&backs_mu);
	return mine;
}

/* drop removes from list (of n) the entries of qp */
static void drop(struct ibv_async_event *list, int *n, struct ibv_qp *qp)
{
	int k = 0;
	for (int j = 0; j < *n; j++)
		if (list[j].event_type == IBV_EVENT_DEVICE_FATAL || list[j].element.qp != qp)
			list[k++] = list[j];
	*n = k;
}

void lip_async_forget_qp(struct ibv_qp *qp)
{
	pthread_mutex_lock(&backs_mu);
	struct back *b = back_of(qp->context, 0);
	if (b) {
		drop(b->q, &b->n, qp);
		drop(b->out, &b->nout, qp);
	}
	pthread_mutex_unlock(&backs_mu);
}

void lip_async_close(struct ibv_context *ctx)
{
	pthread_mutex_lock(&backs_mu);
	struct back *b = back_of(ctx, 0);
	if (b) {
		close(b->wake_fd);
		memset(b, 0, sizeof(*b));
	}
	pthread_mutex_unlock(&backs_mu);
}
