/* Checks the rdma_cm event filter (cm.c) against a scripted
 * rdma_get_cm_event, and the shim's copy of librdmacm's structures
 * (cm.h) against <rdma/rdma_cma.h>:
 *   cm_check test
 * Built by internal/shim's tests:
 *   gcc -O2 -I.. cm_check.c ../cm.c */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <rdma/rdma_cma.h>
#include "cm.h"
#include "check.h"

_Static_assert(offsetof(struct rdma_cm_event, id) == offsetof(struct lip_cm_event, id), "rdma_cm_event.id");
_Static_assert(offsetof(struct rdma_cm_event, listen_id) == offsetof(struct lip_cm_event, listen_id), "rdma_cm_event.listen_id");
_Static_assert(offsetof(struct rdma_cm_event, event) == offsetof(struct lip_cm_event, event), "rdma_cm_event.event");
_Static_assert(offsetof(struct rdma_cm_event, status) == offsetof(struct lip_cm_event, status), "rdma_cm_event.status");
_Static_assert(sizeof(enum rdma_cm_event_type) == sizeof(int), "enum rdma_cm_event_type");
_Static_assert(offsetof(struct rdma_cm_id, verbs) == offsetof(struct lip_cm_id, verbs), "rdma_cm_id.verbs");
_Static_assert(offsetof(struct rdma_cm_id, qp) == offsetof(struct lip_cm_id, qp), "rdma_cm_id.qp");
_Static_assert(RDMA_CM_EVENT_UNREACHABLE == LIP_CM_EVENT_UNREACHABLE, "RDMA_CM_EVENT_UNREACHABLE");

/* ---- a scripted channel: the events librdmacm would return, in order,
 * then EAGAIN (a non-blocking channel with nothing more) ---- */

static struct ibv_qp guarded, open_qp;  /* a QP a layer protects, one it does not */
static struct lip_cm_id id_guarded = {.qp = &guarded}, id_open = {.qp = &open_qp}, id_noqp;
static struct lip_cm_event script[8];
static int nscript, next, acked[8], nacked, asked_status;
static void *channel_seen;

static int get(void *channel, struct lip_cm_event **ev)
{
	channel_seen = channel;
	if (next == nscript) {
		errno = EAGAIN;
		return -1;
	}
	*ev = &script[next++];
	return 0;
}

static int ack(struct lip_cm_event *ev)
{
	acked[nacked++] = (int)(ev - script);
	return 0;
}

static int protects(struct ibv_qp *qp, int status)
{
	asked_status = status;
	return qp == &guarded;
}

/* the connections noted established (+1) and ended (-1), in order */
static int noted[8], nnoted;

static void established(struct ibv_qp *qp, int up)
{
	noted[nnoted++ % 8] = (qp == &guarded ? 10 : 20) + (up ? 1 : -1);
}

static const struct lip_cm_ops ops = {get, ack, protects, established};

static void load(int n, const struct lip_cm_event *evs)
{
	for (int i = 0; i < n; i++)
		script[i] = evs[i];
	nscript = n, next = 0, nacked = 0, asked_status = 0, nnoted = 0;
}

/* An UNREACHABLE of a protected QP is acknowledged and skipped; the
 * application gets the next event. */
static void test_hides_protected(void)
{
	struct lip_cm_event evs[] = {
		{.id = &id_guarded, .event = RDMA_CM_EVENT_UNREACHABLE, .status = -ETIMEDOUT},
		{.id = &id_guarded, .event = RDMA_CM_EVENT_DISCONNECTED},
	};
	load(2, evs);
	struct lip_cm_event *ev = NULL;
	int ret = lip_cm_next((void *)0x1234, &ev, &ops);
	CHECK(ret == 0 && ev == &script[1], "got ret %d event %ld, want the DISCONNECTED (1)", ret, ev ? (long)(ev - script) : -1L);
	CHECK(nacked == 1 && acked[0] == 0, "acked %d events (first %d), want the UNREACHABLE (0) once", nacked, acked[0]);
	CHECK(asked_status == -ETIMEDOUT, "the layers were asked with status %d", asked_status);
	CHECK(channel_seen == (void *)0x1234, "librdmacm was given channel %p", channel_seen);
	CHECK(nnoted == 1 && noted[0] == 9, "noted %d connection changes (first %d), want the end of the protected one", nnoted,
	      noted[0]);
}

/* ESTABLISHED and DISCONNECTED events the application gets are noted,
 * for ids with a QP. */
static void test_notes_connections(void)
{
	struct lip_cm_event evs[] = {
		{.id = &id_guarded, .event = RDMA_CM_EVENT_ESTABLISHED},
		{.id = &id_open, .event = RDMA_CM_EVENT_ESTABLISHED},
		{.id = &id_noqp, .event = RDMA_CM_EVENT_ESTABLISHED},
		{.id = &id_open, .event = RDMA_CM_EVENT_DISCONNECTED},
	};
	load(4, evs);
	for (int i = 0; i < 4; i++) {
		struct lip_cm_event *ev = NULL;
		int ret = lip_cm_next(NULL, &ev, &ops);
		CHECK(ret == 0 && ev == &script[i], "call %d: ret %d event %ld, want %d", i, ret, ev ? (long)(ev - script) : -1L, i);
	}
	CHECK(nnoted == 3 && noted[0] == 11 && noted[1] == 21 && noted[2] == 19, "noted %d: %d %d %d, want 11 21 19", nnoted,
	      noted[0], noted[1], noted[2]);
}

/* Every other event passes as librdmacm returned it, unacknowledged:
 * an UNREACHABLE of an unprotected QP, of an id without a QP (a connect
 * that failed before rdma_create_qp), and other events of a protected
 * QP. */
static void test_passes_the_rest(void)
{
	struct lip_cm_event evs[] = {
		{.id = &id_open, .event = RDMA_CM_EVENT_UNREACHABLE, .status = -ETIMEDOUT},
		{.id = &id_noqp, .event = RDMA_CM_EVENT_UNREACHABLE, .status = -ETIMEDOUT},
		{.id = &id_guarded, .event = RDMA_CM_EVENT_REJECTED, .status = 28},
		{.id = &id_guarded, .event = RDMA_CM_EVENT_ADDR_CHANGE},
		{.id = NULL, .event = RDMA_CM_EVENT_UNREACHABLE},
	};
	load(5, evs);
	for (int i = 0; i < 5; i++) {
		struct lip_cm_event *ev = NULL;
		int ret = lip_cm_next(NULL, &ev, &ops);
		CHECK(ret == 0 && ev == &script[i], "call %d: ret %d event %ld, want %d", i, ret, ev ? (long)(ev - script) : -1L, i);
	}
	CHECK(nacked == 0, "acked %d events the application should get", nacked);
}

/* A non-blocking channel whose only event was hidden: the application
 * gets EAGAIN, as if nothing had come; librdmacm's errors pass. */
static void test_nothing_left(void)
{
	struct lip_cm_event evs[] = {
		{.id = &id_guarded, .event = RDMA_CM_EVENT_UNREACHABLE, .status = -ETIMEDOUT},
		{.id = &id_guarded, .event = RDMA_CM_EVENT_UNREACHABLE, .status = -ETIMEDOUT},
	};
	load(2, evs);
	struct lip_cm_event *ev = NULL;
	errno = 0;
	int ret = lip_cm_next(NULL, &ev, &ops);
	CHECK(ret == -1 && errno == EAGAIN, "ret %d errno %d, want -1 EAGAIN", ret, errno);
	CHECK(nacked == 2, "acked %d of the two hidden events", nacked);
}

int main(int argc, char **argv)
{
	(void)argc, (void)argv;
	test_hides_protected();
	test_passes_the_rest();
	test_nothing_left();
	test_notes_connections();
	CHECK(lip_cm_hide(NULL, &ops) == 0, "a NULL event is hidden");
	printf(fails ? "FAIL (%d)\n" : "PASS\n", fails);
	return fails != 0;
}
