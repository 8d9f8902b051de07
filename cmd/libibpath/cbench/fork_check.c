/* Checks that a child forked without exec never finds the shim's
 * channel lock (chan_mu, channel.c) held by a thread it does not have:
 * the lock is taken across fork(2) (pthread_atfork), so a fork waits for
 * its holder instead. The child then destroys a CQ through the shim's
 * channel code, as a forked program's ibv_destroy_cq does.
 *   fork_check test
 * Built by internal/shim's tests (channel.c is included here, to hold its
 * lock):
 *   gcc -O2 -I.. fork_check.c ../hotpath.c ../divert.c ../express.c ../wrapi.c ../nudge.c ../srq.c -lpthread */
#include "../channel.c"
#define LIP_CHECK_NOOP_HOOKS
#include "check.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

static volatile int holding;

static void *hold(void *arg)
{
	pthread_mutex_lock(&chan_mu);
	holding = 1;
	struct timespec ts = {0, 300 * 1000 * 1000};
	nanosleep(&ts, NULL);
	pthread_mutex_unlock(&chan_mu);
	return NULL;
}

static int destroyed(struct ibv_cq *cq) { return 0; }

int main(int argc, char **argv)
{
	pthread_t t;
	if (pthread_create(&t, NULL, hold, NULL))
		return 2;
	while (!holding)
		sched_yield();
	pid_t pid = fork();
	if (pid == 0) {
		alarm(3); /* a child that found the lock held waits for ever */
		struct ibv_cq cq;
		memset(&cq, 0, sizeof(cq));
		_exit(lip_chan_cq_destroy(&cq, destroyed) == 0 ? 0 : 1);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	pthread_join(t, NULL);
	if (WIFSIGNALED(st)) {
		printf("FAIL the child hung on the channel lock a thread held at fork (killed by signal %d)\n", WTERMSIG(st));
		return 1;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("FAIL the child's destroy failed (status %#x)\n", st);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
