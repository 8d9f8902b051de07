/* Completion channels of the application. After a failover the
 * completions of a diverted QP come from the backup device, whose events
 * the kernel never delivers on the application's channel: a program that
 * sleeps in ibv_get_cq_event (or in poll(2) on the channel's fd) would
 * sleep forever. So the shim hands the application a channel of its own:
 *
 *   - its fd is an epoll fd watching the kernel's event file (the real
 *     channel's fd, made non-blocking) and an eventfd of the shim: it is
 *     readable when either is, so poll(2), select(2) and epoll work on it;
 *   - ibv_create_cq / create_cq_ex get the real channel, so the kernel
 *     binds the CQ to its event file as before;
 *   - ibv_req_notify_cq marks the CQ armed (and arms the backup CQs of a
 *     CQ on the express lane); layer 2 calls lip_chan_wake when it has
 *     completions for the application on a CQ: an armed CQ then gets an
 *     event of the shim (one per arming, as the kernel's), which
 *     ibv_get_cq_event returns before reading the kernel's;
 *   - ibv_destroy_cq takes the shim's events back out of the CQ's
 *     acknowledged count, which libibverbs compares with the kernel's.
 *
 * Every function here takes chan_mu: it is not the data path. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include "shim.h"

int lip_channels = 0; /* set by the Go side when layer 2 runs */

struct lip_chan {
	struct ibv_comp_channel app;    /* the application's: fd is epfd */
	struct ibv_comp_channel *real;  /* libibverbs's: the kernel's event file */
	int evfd;                       /* readable while events of the shim wait */
	struct lip_ccq *head, *tail;    /* CQs with an event of the shim waiting */
};

/* An application CQ created on a shim channel. */
struct lip_ccq {
	struct ibv_cq *cq;
	struct lip_chan *ch;
	int armed;              /* notification requested, no event since */
	int queued;             /* on ch's list */
	uint32_t delivered;     /* events of the shim returned to the application */
	/* for lip_chan_dump: requests for an event; wakes that queued one,
	 * found the CQ not armed, or found one queued already; the
	 * kernel's events returned */
	uint32_t arms, wakes, unarmed, requeued, kevents;
	struct lip_ccq *next;
};

static pthread_mutex_t chan_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lip_chan *chans[LIP_MAX_CHAN];
static struct lip_ccq *ccqs[LIP_CHAN_CQS]; /* open addressing on the ibv_cq address */
static int nccq;

#define CCQ_DEAD ((struct lip_ccq *)1)

/* fork(2): chan_mu is held across it (prepare), so that no other thread
 * holds it in the child, which has only the forking thread: the child's
 * ibv_destroy_cq and ibv_get_cq_event take it too (a lock a vanished
 * thread held would never be released there). */
static void chan_fork_lock(void) { pthread_mutex_lock(&chan_mu); }
static void chan_fork_unlock(void) { pthread_mutex_unlock(&chan_mu); }

__attribute__((constructor)) static void chan_atfork(void)
{
	if (pthread_atfork(chan_fork_lock, chan_fork_unlock, chan_fork_unlock))
		fprintf(stderr, "libibpath: pthread_atfork failed: a child forked without exec may hang in ibv_destroy_cq\n");
}

static struct lip_chan *chan_of(struct ibv_comp_channel *ch)
{
	for (int i = 0; i < LIP_MAX_CHAN; i++)
		if (chans[i] && &chans[i]->app == ch)
			return chans[i];
	return NULL;
}

/* ccq_slot is cq's slot; with add, a free one when cq has none. */
static struct lip_ccq **ccq_slot(struct ibv_cq *cq, int add)
{
	struct lip_ccq **hole = NULL;
	uint32_t h = lip_ptr_hash(cq, LIP_CHAN_CQS);
	for (uint32_t i = 0; i < LIP_CHAN_CQS; i++) {
		struct lip_ccq **s = &ccqs[(h + i) & (LIP_CHAN_CQS - 1)];
		if (!*s)
			return add ? (hole ? hole : s) : NULL;
		if (*s == CCQ_DEAD) {
			if (!hole)
				hole = s;
		} else if ((*s)->cq == cq) {
			return s;
		}
	}
	return add ? hole : NULL;
}

/* lip_chan_new wraps a channel libibverbs created: the application gets
 * the returned one. NULL (errno set) when it cannot; the application then
 * keeps the real channel, whose events cover the default device only. */
struct ibv_comp_channel *lip_chan_new(struct ibv_comp_channel *real)
{
	struct lip_chan *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->real = real;
	c->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	int fl = fcntl(real->fd, F_GETFL);
	struct epoll_event k = {.events = EPOLLIN, .data.fd = real->fd};
	struct epoll_event e = {.events = EPOLLIN, .data.fd = c->evfd};
	if (c->evfd < 0 || ep < 0 || fl < 0 || fcntl(real->fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, real->fd, &k) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c->evfd, &e) < 0)
		goto fail;
	c->app.context = real->context;
	c->app.fd = ep;
	pthread_mutex_lock(&chan_mu);
	int i;
	for (i = 0; i < LIP_MAX_CHAN && chans[i]; i++)
		;
	if (i < LIP_MAX_CHAN)
		chans[i] = c;
	pthread_mutex_unlock(&chan_mu);
	if (i == LIP_MAX_CHAN) {
		errno = ENOSPC;
		goto fail;
	}
	return &c->app;
fail:;
	int err = errno;
	if (fl >= 0)
		fcntl(real->fd, F_SETFL, fl);
	if (ep >= 0)
		close(ep);
	if (c->evfd >= 0)
		close(c->evfd);
	free(c);
	errno = err;
	return NULL;
}

/* lip_chan_real is the channel to give libibverbs for ch: the real one
 * when ch is the shim's, ch itself otherwise. */
struct ibv_comp_channel *lip_chan_real(struct ibv_comp_channel *ch)
{
	if (!ch)
		return ch;
	pthread_mutex_lock(&chan_mu);
	struct lip_chan *c = chan_of(ch);
	pthread_mutex_unlock(&chan_mu);
	return c ? c->real : ch;
}

/* lip_chan_destroy destroys ch with destroy (libibverbs's) when it is the
 * shim's: the real channel first (EBUSY while CQs use it), then the
 * shim's fds. -1 when ch is not the shim's. */
int lip_chan_destroy(struct ibv_comp_channel *ch, int (*destroy)(struct ibv_comp_channel *))
{
	pthread_mutex_lock(&chan_mu);
	struct lip_chan *c = chan_of(ch);
	int ret = -1;
	if (c) {
		ret = destroy(c->real);
		if (ret == 0) {
			for (int i = 0; i < LIP_MAX_CHAN; i++)
				if (chans[i] == c)
					chans[i] = NULL;
			close(c->app.fd);
			close(c->evfd);
			free(c);
		}
	}
	pthread_mutex_unlock(&chan_mu);
	return ret;
}

/* lip_chan_cq_created records a CQ the application created on ch. */
void lip_chan_cq_created(struct ibv_cq *cq, struct ibv_comp_channel *ch)
{
	struct lip_ccq *q = calloc(1, sizeof(*q));
	pthread_mutex_lock(&chan_mu);
	struct lip_chan *c = ch ? chan_of(ch) : NULL;
	struct lip_ccq **s = c && q ? ccq_slot(cq, 1) : NULL;
	if (s && *s && *s != CCQ_DEAD)
		s = NULL; /* a CQ at the address of one never destroyed: keep the old */
	if (s) {
		q->cq = cq;
		q->ch = c;
		*s = q;
		__atomic_store_n(&nccq, nccq + 1, __ATOMIC_RELAXED);
		q = NULL;
	} else if (c) {
		fprintf(stderr, "libibpath: CQ %p: too many CQs on completion channels; events of its backup completions are not delivered\n", (void *)cq);
	}
	pthread_mutex_unlock(&chan_mu);
	free(q);
}

static void unqueue(struct lip_ccq *q)
{
	struct lip_chan *c = q->ch;
	struct lip_ccq **p = &c->head, *prev = NULL;
	for (; *p && *p != q; prev = *p, p = &(*p)->next)
		;
	if (!*p)
		return;
	*p = q->next;
	if (c->tail == q)
		c->tail = prev;
	q->next = NULL;
	q->queued = 0;
	uint64_t v;
	if (!c->head && read(c->evfd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing to drain */
	}
}

/* lip_chan_cq_destroy destroys cq with destroy (the provider's path in
 * libibverbs). The events of the shim the application acknowledged are
 * taken out of cq's acknowledged count first: libibverbs waits until that
 * count equals the kernel's, which never saw them. */
int lip_chan_cq_destroy(struct ibv_cq *cq, int (*destroy)(struct ibv_cq *))
{
	pthread_mutex_lock(&chan_mu);
	struct lip_ccq **s = nccq ? ccq_slot(cq, 0) : NULL;
	struct lip_ccq *q = s ? *s : NULL;
	uint32_t n = q ? q->delivered : 0;
	if (q && q->queued)
		unqueue(q);
	if (n) {
		pthread_mutex_lock(&cq->mutex);
		cq->comp_events_completed -= n;
		pthread_mutex_unlock(&cq->mutex);
	}
	pthread_mutex_unlock(&chan_mu);
	int ret = destroy(cq);
	pthread_mutex_lock(&chan_mu);
	if (ret == 0 && q) {
		s = ccq_slot(cq, 0);
		if (s && *s == q) {
			*s = CCQ_DEAD;
			__atomic_store_n(&nccq, nccq - 1, __ATOMIC_RELAXED);
		}
		free(q);
	} else if (n) {
		pthread_mutex_lock(&cq->mutex);
		cq->comp_events_completed += n;
		pthread_mutex_unlock(&cq->mutex);
	}
	pthread_mutex_unlock(&chan_mu);
	return ret;
}

/* ccq_flag reads cq's armed flag, setting it first with set: -1 when cq
 * is not on a shim channel. */
static int ccq_flag(struct ibv_cq *cq, int set)
{
	if (!__atomic_load_n(&nccq, __ATOMIC_RELAXED))
		return -1;
	pthread_mutex_lock(&chan_mu);
	struct lip_ccq **s = ccq_slot(cq, 0);
	if (s && set) {
		(*s)->armed = 1;
		(*s)->arms++;
	}
	int armed = s ? (*s)->armed : -1;
	pthread_mutex_unlock(&chan_mu);
	return armed;
}

/* lip_chan_arm: the application requested cq's next event. 1 when cq is
 * on a shim channel. */
int lip_chan_arm(struct ibv_cq *cq) { return ccq_flag(cq, 1) == 1; }

/* lip_chan_armed: whether cq waits for an event (the express lane arms
 * the backup CQs of a CQ it takes on when it does). */
int lip_chan_armed(struct ibv_cq *cq) { return ccq_flag(cq, 0) == 1; }

/* lip_chan_wake: layer 2 has completions for the application on cq. An
 * armed CQ gets an event of the shim; 1 when it did. */
int lip_chan_wake(struct ibv_cq *cq)
{
	if (!__atomic_load_n(&nccq, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&chan_mu);
	struct lip_ccq **s = ccq_slot(cq, 0);
	struct lip_ccq *q = s ? *s : NULL;
	int woke = 0;
	if (q && q->armed && !q->queued) {
		struct lip_chan *c = q->ch;
		q->armed = 0;
		q->queued = 1;
		q->next = NULL;
		if (c->tail)
			c->tail->next = q;
		else
			c->head = q;
		c->tail = q;
		uint64_t one = 1;
		if (write(c->evfd, &one, sizeof(one)) < 0) {
			/* the counter is far from overflowing: cannot fail */
		}
		woke = 1;
		q->wakes++;
	} else if (q && !q->armed) {
		q->unarmed++;
	} else if (q) {
		q->requeued++;
	}
	pthread_mutex_unlock(&chan_mu);
	return woke;
}

/* read_restarts: whether libibverbs's blocking read of the event file
 * would have gone on where epoll_wait returned EINTR. The read restarts
 * after a stop and continue (SIGSTOP, a debugger attaching, a batch
 * system suspending the job) and after a handler installed with
 * SA_RESTART (every one of Go's, glibc's signal()); epoll_wait returns
 * EINTR after either. It fails with EINTR only after a handler without
 * SA_RESTART, and which signal interrupted is not known here: so it goes
 * on unless some handler without SA_RESTART is installed. */
static int read_restarts(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		/* SIGKILL, SIGSTOP and glibc's own signals refuse: skipped */
		if (sigaction(sig, NULL, &sa) == 0 && !(sa.sa_flags & SA_RESTART) &&
		    (sa.sa_flags & SA_SIGINFO ? sa.sa_sigaction != NULL
					      : sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN))
			return 0;
	}
	return 1;
}

/* lip_chan_get_event is ibv_get_cq_event on ch; get is libibverbs's. An
 * event of the shim comes first; then the kernel's; then, unless the
 * application made the fd non-blocking, it waits for either, through
 * signals as libibverbs's read would (read_restarts). -2 when ch is not
 * the shim's. */
int lip_chan_get_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx,
		       int (*get)(struct ibv_comp_channel *, struct ibv_cq **, void **))
{
	for (;;) {
		pthread_mutex_lock(&chan_mu);
		struct lip_chan *c = chan_of(ch);
		if (!c) {
			pthread_mutex_unlock(&chan_mu);
			return -2;
		}
		struct lip_ccq *q = c->head;
		if (q) {
			unqueue(q);
			q->delivered++;
			*cq = q->cq;
			*cq_ctx = q->cq->cq_context;
			pthread_mutex_unlock(&chan_mu);
			return 0;
		}
		struct ibv_comp_channel *real = c->real;
		int ep = c->app.fd;
		pthread_mutex_unlock(&chan_mu);
		if (get(real, cq, cq_ctx) == 0) {
			pthread_mutex_lock(&chan_mu);
			struct lip_ccq **s = nccq ? ccq_slot(*cq, 0) : NULL;
			if (s) {
				(*s)->armed = 0;
				(*s)->kevents++;
			}
			pthread_mutex_unlock(&chan_mu);
			return 0;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		int fl = fcntl(ep, F_GETFL);
		if (fl < 0)
			return -1;
		if (fl & O_NONBLOCK) {
			errno = EAGAIN;
			return -1;
		}
		struct epoll_event ev;
		if (epoll_wait(ep, &ev, 1, -1) < 0 && (errno != EINTR || !read_restarts()))
			return -1;
	}
}

/* lip_req_notify_cq stands in for the provider's req_notify_cq (swapped
 * by lip_ctx_add while lip_channels is on). A CQ on the express lane gets
 * the events of its backup CQs too. A diverted CQ's own device may be
 * gone: its refusal is not the application's concern then. In a child
 * forked without exec (lip_child) the arm is the provider's alone, as in
 * plain verbs: the lane is the parent's layer 2's, which did not follow. */
int lip_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct lip_ctx *c = lip_ctx_of(cq->context);
	if (!c || !c->req_notify_cq)
		return EINVAL;
	int ret = c->req_notify_cq(cq, solicited_only);
	if (lip_chan_arm(cq) && !lip_child) {
		lip_express_arm(cq);
		if (ret && lip_cq_diverted(cq))
			ret = 0;
	}
	return ret;
}

/* lip_chan_dump writes every CQ on a shim channel, its flags and
 * counters, to fd (lip_debug_state). Without chan_mu: a debugger calls it
 * in a stopped process, where a thread stopped inside would hold it. */
void lip_chan_dump(int fd)
{
	for (int i = 0; i < LIP_CHAN_CQS; i++) {
		struct lip_ccq *q = ccqs[i];
		if (!q || q == CCQ_DEAD)
			continue;
		int waiting = 0;
		for (struct lip_ccq *w = q->ch->head; w && waiting < 1000; w = w->next)
			waiting++;
		dprintf(fd,
			"  channel CQ %p (channel fd %d, %d events of the shim waiting): armed %d queued %d delivered %u "
			"arms %u wakes %u unarmed %u requeued %u kernel %u\n",
			(void *)q->cq, q->ch->app.fd, waiting, q->armed, q->queued, q->delivered, q->arms, q->wakes,
			q->unarmed, q->requeued, q->kevents);
	}
}
