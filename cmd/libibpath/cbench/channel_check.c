/* Checks the shim's completion channels (channel.c) against a stand-in
 * for libibverbs's: real channels are pipes whose reads deliver the
 * kernel's event records, as the uverbs event file does.
 *   channel_check test
 *   channel_check bench [N]  ns per ibv_get_cq_event with an event ready
 *                            and per ibv_req_notify_cq: libibverbs's
 *                            stand-in called directly vs the shim's
 * Built by internal/shim's tests:
 *   gcc -O2 -I.. channel_check.c ../hotpath.c ../divert.c ../express.c ../channel.c ../wrapi.c ../nudge.c ../srq.c -lpthread */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include "shim.h"
#define LIP_CHECK_NOOP_HOOKS
#include "check.h"

/* ---- the stand-in for libibverbs and the kernel ---- */

static struct ibv_context ctx;
static int kernel_fd[2];          /* the event file: [0] the channel reads, [1] the kernel writes */
static uint32_t reported[8];      /* events the kernel reported per CQ (index: cq_context) */

static struct ibv_comp_channel *real_create(void)
{
	struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));
	if (!ch || pipe2(kernel_fd, O_CLOEXEC)) {
		perror("real channel");
		exit(2);
	}
	ch->context = &ctx;
	ch->fd = kernel_fd[0];
	return ch;
}

static int real_destroy(struct ibv_comp_channel *ch)
{
	if (ch->refcnt)
		return EBUSY;
	close(ch->fd);
	close(kernel_fd[1]);
	free(ch);
	return 0;
}

/* ibv_get_cq_event: read one record (a CQ handle) from the event file */
static int real_gets;
static int real_get(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx)
{
	uint64_t h;
	real_gets++;
	if (read(ch->fd, &h, sizeof(h)) != sizeof(h))
		return -1;
	*cq = (struct ibv_cq *)(uintptr_t)h;
	*cq_ctx = (*cq)->cq_context;
	return 0;
}

static void kernel_event(struct ibv_cq *cq)
{
	uint64_t h = (uintptr_t)cq;
	reported[(uintptr_t)cq->cq_context]++;
	if (write(kernel_fd[1], &h, sizeof(h)) != sizeof(h))
		abort();
}

/* ibv_ack_cq_events */
static void ack(struct ibv_cq *cq, unsigned n)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += n;
	pthread_mutex_unlock(&cq->mutex);
}

/* the provider's destroy: ibv_cmd_destroy_cq waits until the acknowledged
 * count equals what the kernel reported; here a mismatch is a failure
 * rather than a hang */
static int destroy_mismatch;
static int real_destroy_cq(struct ibv_cq *cq)
{
	if (cq->comp_events_completed != reported[(uintptr_t)cq->cq_context])
		destroy_mismatch++;
	if (cq->channel)
		cq->channel->refcnt--;
	return 0;
}

static void cq_init(struct ibv_cq *cq, uintptr_t id, struct ibv_comp_channel *real)
{
	memset(cq, 0, sizeof(*cq));
	cq->context = &ctx;
	cq->cq_context = (void *)id;
	cq->channel = real;
	real->refcnt++;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
}

static int readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static int get(struct ibv_comp_channel *ch, struct ibv_cq **cq)
{
	void *c = NULL;
	int r = lip_chan_get_event(ch, cq, &c, real_get);
	if (r == 0 && c != (*cq)->cq_context)
		return -3;
	return r;
}

static void nonblocking(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* ---- checks ---- */

static struct ibv_comp_channel *real, *ch;
static struct ibv_cq cq1, cq2;

static void check_setup(void)
{
	real = real_create();
	ch = lip_chan_new(real);
	CHECK(ch && ch != real && ch->fd != real->fd && ch->context == &ctx, "wrapped channel");
	CHECK(lip_chan_real(ch) == real && lip_chan_real(real) == real && lip_chan_real(NULL) == NULL, "lip_chan_real");
	CHECK(fcntl(real->fd, F_GETFL) & O_NONBLOCK, "the event file is made non-blocking");
	cq_init(&cq1, 1, real);
	cq_init(&cq2, 2, real);
	lip_chan_cq_created(&cq1, ch);
	lip_chan_cq_created(&cq2, ch);
	CHECK(!readable(ch->fd), "a new channel is not readable");
}

/* a kernel event goes through, and disarms its CQ */
static void check_kernel_event(void)
{
	struct ibv_cq *got = NULL;
	CHECK(lip_chan_arm(&cq1) == 1, "cq1 is on a shim channel");
	kernel_event(&cq1);
	CHECK(readable(ch->fd), "readable on a kernel event");
	CHECK(get(ch, &got) == 0 && got == &cq1, "kernel event: cq %p", (void *)got);
	CHECK(!readable(ch->fd), "not readable once read");
	CHECK(lip_chan_wake(&cq1) == 0, "the kernel's event disarmed cq1");
	ack(&cq1, 1);
}

/* the shim's events: only for an armed CQ, once per arming, before the
 * kernel's */
static void check_wake(void)
{
	struct ibv_cq *got = NULL;
	CHECK(lip_chan_wake(&cq2) == 0 && !readable(ch->fd), "a CQ not armed is not woken");
	lip_chan_arm(&cq2);
	CHECK(lip_chan_armed(&cq2) && !lip_chan_armed(&cq1), "armed state");
	CHECK(lip_chan_wake(&cq2) == 1 && readable(ch->fd), "armed CQ woken");
	CHECK(lip_chan_wake(&cq2) == 0, "one event per arming");
	kernel_event(&cq1);
	CHECK(get(ch, &got) == 0 && got == &cq2, "the shim's event first: %p", (void *)got);
	CHECK(readable(ch->fd), "the kernel's event still there");
	CHECK(get(ch, &got) == 0 && got == &cq1, "then the kernel's: %p", (void *)got);
	CHECK(!readable(ch->fd), "nothing left");
	ack(&cq2, 1);
	ack(&cq1, 1);

	/* a non-blocking fd: EAGAIN, as libibverbs's read gives */
	nonblocking(ch->fd, 1);
	errno = 0;
	CHECK(get(ch, &got) == -1 && errno == EAGAIN, "non-blocking, nothing waiting: errno %d", errno);
	nonblocking(ch->fd, 0);

	/* FIFO across CQs */
	lip_chan_arm(&cq1);
	lip_chan_arm(&cq2);
	lip_chan_wake(&cq1);
	lip_chan_wake(&cq2);
	CHECK(get(ch, &got) == 0 && got == &cq1 && get(ch, &got) == 0 && got == &cq2 && !readable(ch->fd), "two CQs in order");
	ack(&cq1, 1);
	ack(&cq2, 1);
}

/* the counters lip_chan_dump shows for a debugger: each arming, each wake
 * by what it found, each event returned */
static void check_dump(void)
{
	struct ibv_cq *got = NULL;
	lip_chan_arm(&cq2);
	lip_chan_wake(&cq2);
	lip_chan_arm(&cq2); /* armed again before the event was read */
	lip_chan_wake(&cq2);
	CHECK(get(ch, &got) == 0 && got == &cq2 && !readable(ch->fd), "one event for two wakes");
	ack(&cq2, 1);
	char path[] = "/tmp/channel_check.XXXXXX", buf[4096] = "", want[256];
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
	if (fd < 0)
		return;
	unlink(path);
	lip_chan_dump(fd);
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	/* cq2 since check_setup: a wake unarmed, armed and woken, a wake
	 * unarmed (its event queued), armed and woken (FIFO), then here */
	snprintf(want, sizeof(want),
		 "channel CQ %p (channel fd %d, 0 events of the shim waiting): armed 1 queued 0 delivered 3 arms 4 wakes 3 "
		 "unarmed 2 requeued 1 kernel 0\n",
		 (void *)&cq2, ch->fd);
	CHECK(strstr(buf, want) != NULL, "dump: want\n%s got\n%s", want, buf);
	snprintf(want, sizeof(want), "channel CQ %p (channel fd %d, 0 events of the shim waiting): armed 0 queued 0 delivered 1 arms 2 wakes 1 unarmed 1 requeued 0 kernel 2\n",
		 (void *)&cq1, ch->fd);
	CHECK(strstr(buf, want) != NULL, "dump: want\n%s got\n%s", want, buf);
}

struct waker {
	struct ibv_cq *cq;
	int kernel;
};

static void *wake_later(void *p)
{
	struct waker *w = p;
	struct timespec ts = {0, 50 * 1000 * 1000};
	nanosleep(&ts, NULL);
	if (w->kernel) {
		kernel_event(w->cq);
	} else {
		lip_chan_arm(w->cq);
		lip_chan_wake(w->cq);
	}
	return NULL;
}

/* a blocked ibv_get_cq_event wakes on either kind of event */
static void check_blocking(void)
{
	for (int kernel = 0; kernel < 2; kernel++) {
		struct waker w = {kernel ? &cq1 : &cq2, kernel};
		pthread_t t;
		pthread_create(&t, NULL, wake_later, &w);
		struct ibv_cq *got = NULL;
		int gets = real_gets;
		int r = get(ch, &got);
		pthread_join(t, NULL);
		CHECK(r == 0 && got == w.cq, "blocked get (kernel %d): %d %p", kernel, r, (void *)got);
		CHECK(real_gets > gets, "it tried the event file first");
		ack(got, 1);
	}
}

/* a blocked ibv_get_cq_event through signals, as libibverbs's blocking
 * read: on through a stop and continue, and through a handler with
 * SA_RESTART; EINTR after a handler without it. In a child, which the
 * parent stops, signals and wakes with a kernel event. */
static void on_usr1(int sig) { (void)sig; }

static int get_through_signals(int restart, int stop)
{
	pid_t pid = fork();
	if (pid < 0)
		return -100;
	if (pid == 0) {
		if (!stop) {
			struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = restart ? SA_RESTART : 0};
			sigemptyset(&sa.sa_mask);
			sigaction(SIGUSR1, &sa, NULL);
		}
		struct ibv_cq *got = NULL;
		int r = get(ch, &got);
		_exit(r == 0 && got == &cq1 ? 0 : r == -1 && errno == EINTR ? 3 : 4);
	}
	struct timespec ts = {0, 100 * 1000 * 1000};
	nanosleep(&ts, NULL); /* the child blocks in epoll_wait */
	int st;
	if (stop) {
		kill(pid, SIGSTOP);
		waitpid(pid, &st, WUNTRACED);
		kill(pid, SIGCONT);
	} else {
		kill(pid, SIGUSR1);
	}
	nanosleep(&ts, NULL);
	kernel_event(&cq1); /* the pipe is shared: wakes a child still waiting */
	waitpid(pid, &st, 0);
	/* the event was the child's (a child that failed left it: read it
	 * here, the event file is non-blocking) */
	uint64_t h;
	if (read(kernel_fd[0], &h, sizeof(h)) < 0 && errno != EAGAIN)
		return -101;
	reported[1]--;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

static void check_signals(void)
{
	int r;
	CHECK((r = get_through_signals(0, 1)) == 0, "stopped and continued: the wait goes on (child %d; 3: EINTR)", r);
	CHECK((r = get_through_signals(1, 0)) == 0, "a handler with SA_RESTART: the wait goes on (child %d)", r);
	CHECK((r = get_through_signals(0, 0)) == 3, "a handler without SA_RESTART: EINTR, as read gives (child %d)", r);
}

/* destroying a CQ: the shim's events leave the acknowledged count, and
 * one still queued leaves the channel */
static void check_destroy_cq(void)
{
	struct ibv_cq *got = NULL;
	lip_chan_arm(&cq1);
	lip_chan_wake(&cq1);
	CHECK(get(ch, &got) == 0 && got == &cq1, "event");
	ack(&cq1, 1);
	lip_chan_arm(&cq2);
	lip_chan_wake(&cq2);
	CHECK(readable(ch->fd), "cq2's event waits");
	CHECK(lip_chan_cq_destroy(&cq2, real_destroy_cq) == 0, "destroy cq2");
	CHECK(!readable(ch->fd), "its waiting event went with it");
	CHECK(lip_chan_cq_destroy(&cq1, real_destroy_cq) == 0, "destroy cq1");
	CHECK(destroy_mismatch == 0, "acknowledged counts differed from the kernel's at destroy (%d): libibverbs would hang", destroy_mismatch);
	CHECK(cq1.comp_events_completed == reported[1], "cq1 count %u, kernel %u", cq1.comp_events_completed, reported[1]);
	CHECK(lip_chan_arm(&cq1) == 0 && lip_chan_wake(&cq1) == 0, "a destroyed CQ is forgotten");
}

/* destroying the channel: EBUSY while a CQ uses it, then the fds go */
static void check_destroy_channel(void)
{
	struct ibv_cq cq3;
	cq_init(&cq3, 3, real);
	lip_chan_cq_created(&cq3, ch);
	CHECK(lip_chan_destroy(ch, real_destroy) == EBUSY, "EBUSY while a CQ uses it");
	CHECK(lip_chan_real(ch) == real, "still the shim's");
	CHECK(lip_chan_cq_destroy(&cq3, real_destroy_cq) == 0, "destroy cq3");
	int fd = ch->fd;
	CHECK(lip_chan_destroy(real, real_destroy) == -1, "not the shim's: -1");
	CHECK(lip_chan_destroy(ch, real_destroy) == 0, "destroyed");
	CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "its epoll fd is closed");
}

/* the provider's req_notify_cq, through the shim's */
static int notifies, notify_ret;
static int stub_notify(struct ibv_cq *cq, int solicited) { notifies++; return notify_ret; }
static int stub_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return 0; }

static void check_req_notify(void)
{
	lip_channels = 1;
	ctx.ops.req_notify_cq = stub_notify;
	ctx.ops.poll_cq = stub_poll;
	CHECK(lip_ctx_add(&ctx) != NULL, "lip_ctx_add");
	CHECK(ctx.ops.req_notify_cq == lip_req_notify_cq, "req_notify_cq swapped");
	real = real_create();
	ch = lip_chan_new(real);
	struct ibv_cq cq4, plain;
	cq_init(&cq4, 4, real);
	lip_chan_cq_created(&cq4, ch);
	cq_init(&plain, 5, real);
	CHECK(ctx.ops.req_notify_cq(&cq4, 0) == 0 && notifies == 1, "the provider is called");
	CHECK(lip_chan_wake(&cq4) == 1, "and the CQ is armed");
	notify_ret = EIO;
	CHECK(ctx.ops.req_notify_cq(&plain, 0) == EIO, "the provider's refusal reaches the application");
	CHECK(ctx.ops.req_notify_cq(&cq4, 0) == EIO, "for an undiverted CQ on a shim channel too");
	struct ibv_qp qp = {.context = &ctx, .qp_num = 0x42, .send_cq = &cq4, .recv_cq = &cq4};
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 4, .max_recv_wr = 4}};
	struct lip_qp *q = lip_qp_add(&qp, &a);
	CHECK(q && lip_divert(q) == 0, "divert");
	CHECK(ctx.ops.req_notify_cq(&cq4, 0) == 0 && lip_chan_armed(&cq4),
	      "a diverted CQ's own device refusing is not the application's concern: its events come from the shim");
	lip_qp_remove(&qp);
	lip_ctx_remove(&ctx);
	CHECK(ctx.ops.req_notify_cq == stub_notify, "req_notify_cq restored");
}


/* bench: best of rounds, direct and shim alternating. A get includes
 * the kernel's write of the record (the same in both). */
static int bench(long n, int rounds)
{
	lip_channels = 1;
	ctx.ops.req_notify_cq = stub_notify;
	ctx.ops.poll_cq = stub_poll;
	if (!lip_ctx_add(&ctx)) {
		fprintf(stderr, "lip_ctx_add failed\n");
		return 2;
	}
	real = real_create();
	ch = lip_chan_new(real);
	static struct ibv_cq cq;
	cq_init(&cq, 1, real);
	lip_chan_cq_created(&cq, ch);
	double best[2][2] = {{1e18, 1e18}, {1e18, 1e18}}; /* [direct, shim][get, notify] */
	for (int r = 0; r < rounds; r++) {
		for (int mode = 0; mode < 2; mode++) {
			struct ibv_cq *got;
			void *c;
			double t0 = now_ns();
			for (long i = 0; i < n; i++) {
				kernel_event(&cq);
				if ((mode ? lip_chan_get_event(ch, &got, &c, real_get) : real_get(real, &got, &c)) != 0)
					return 3;
			}
			double t1 = now_ns();
			for (long i = 0; i < n; i++)
				(mode ? ctx.ops.req_notify_cq : stub_notify)(&cq, 0);
			double t2 = now_ns();
			if ((t1 - t0) / n < best[mode][0])
				best[mode][0] = (t1 - t0) / n;
			if ((t2 - t1) / n < best[mode][1])
				best[mode][1] = (t2 - t1) / n;
		}
	}
	printf("get_cq_event direct_ns %.2f shim_ns %.2f added_ns %.2f\n", best[0][0], best[1][0], best[1][0] - best[0][0]);
	printf("req_notify_cq direct_ns %.2f shim_ns %.2f added_ns %.2f\n", best[0][1], best[1][1], best[1][1] - best[0][1]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "bench") == 0)
		return bench(argc > 2 ? atol(argv[2]) : 200000, argc > 3 ? atoi(argv[3]) : 5);
	if (argc < 2 || strcmp(argv[1], "test")) {
		fprintf(stderr, "usage: channel_check test | bench [N [rounds]]\n");
		return 2;
	}
	check_setup();
	check_kernel_event();
	check_wake();
	check_dump();
	check_blocking();
	check_signals();
	check_destroy_cq();
	check_destroy_channel();
	check_req_notify();
	if (fails) {
		printf("%d checks failed\n", fails);
		return 1;
	}
	printf("ok\n");
	return 0;
}
