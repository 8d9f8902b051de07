/* Checks the async event filter (asyncev.c) against a scripted
 * ibv_get_async_event:
 *   asyncev_check
 * Built by internal/shim's tests:
 *   gcc -O2 -I.. asyncev_check.c ../asyncev.c */
#include <errno.h>
#include <string.h>
#include "asyncev.h"
#include "check.h"

static struct ibv_context ctx;
static struct ibv_qp carried, bare; /* a QP layer 2 carries, one it does not */
static struct ibv_async_event script[8];
static int nscript, next, acked[8], nacked, asked;

static int get(struct ibv_context *c, struct ibv_async_event *ev)
{
	CHECK(c == &ctx, "get on another context");
	if (next == nscript) {
		errno = EAGAIN;
		return -1;
	}
	*ev = script[next++];
	return 0;
}

static void ack(struct ibv_async_event *ev)
{
	for (int i = 0; i < nscript; i++)
		if (!memcmp(ev, &script[i], sizeof *ev))
			acked[nacked++] = i;
}

/* the Go side's decision: keep what lip_async_keepable allows, for the
 * carried QP, and DEVICE_FATAL when the script says the device is carried */
static int device_carried;
static int keep(struct ibv_context *c, const struct ibv_async_event *ev)
{
	asked++;
	if (!lip_async_keepable(ev->event_type))
		return 0;
	if (ev->event_type == IBV_EVENT_DEVICE_FATAL)
		return device_carried;
	return ev->element.qp == &carried;
}

static const struct lip_async_ops ops = {get, ack, keep};

static void load(int n, const struct ibv_async_event *evs)
{
	for (int i = 0; i < n; i++)
		script[i] = evs[i];
	nscript = n, next = 0, nacked = 0, asked = 0;
}

/* A fatal event of a carried QP is acknowledged and skipped: the
 * application gets the next event. */
static void test_keeps_carried(void)
{
	struct ibv_async_event evs[] = {
		{.element.qp = &carried, .event_type = IBV_EVENT_QP_FATAL},
		{.element.qp = &carried, .event_type = IBV_EVENT_QP_REQ_ERR},
		{.element.port_num = 1, .event_type = IBV_EVENT_PORT_ERR},
	};
	load(3, evs);
	struct ibv_async_event got;
	int ret = lip_async_filter(&ctx, &got, &ops);
	CHECK(ret == 0 && got.event_type == IBV_EVENT_PORT_ERR, "got %d type %d, want the PORT_ERR", ret, got.event_type);
	CHECK(nacked == 2 && acked[0] == 0 && acked[1] == 1, "acked %d (%d %d), want the two kept", nacked, acked[0], acked[1]);
	CHECK(asked == 3, "asked about %d events, want 3", asked);
}

/* The same events of a QP layer 2 does not carry, and the events the
 * filter never keeps, reach the application unacknowledged. */
static void test_passes_bare(void)
{
	struct ibv_async_event evs[] = {
		{.element.qp = &bare, .event_type = IBV_EVENT_QP_FATAL},
		{.element.qp = &carried, .event_type = IBV_EVENT_COMM_EST},
		{.element.cq = NULL, .event_type = IBV_EVENT_CQ_ERR},
	};
	load(3, evs);
	for (int i = 0; i < 3; i++) {
		struct ibv_async_event got;
		int ret = lip_async_filter(&ctx, &got, &ops);
		CHECK(ret == 0 && !memcmp(&got, &evs[i], sizeof got), "event %d: ret %d type %d", i, ret, got.event_type);
	}
	CHECK(nacked == 0, "acked %d events the application gets", nacked);
}

/* DEVICE_FATAL: kept only when the device is carried. */
static void test_device_fatal(void)
{
	struct ibv_async_event evs[] = {{.element.port_num = 0, .event_type = IBV_EVENT_DEVICE_FATAL}};
	struct ibv_async_event got;
	load(1, evs);
	device_carried = 0;
	CHECK(lip_async_filter(&ctx, &got, &ops) == 0 && got.event_type == IBV_EVENT_DEVICE_FATAL && nacked == 0,
	      "DEVICE_FATAL of a device not carried: not returned as it came");
	load(1, evs);
	device_carried = 1;
	errno = 0;
	CHECK(lip_async_filter(&ctx, &got, &ops) == -1 && errno == EAGAIN && nacked == 1,
	      "DEVICE_FATAL of a carried device: returned, or not acked (nacked %d)", nacked);
}

/* A non-blocking fd with only kept events: the call fails with EAGAIN,
 * as with nothing pending, after acknowledging them. */
static void test_nonblocking(void)
{
	struct ibv_async_event evs[] = {{.element.qp = &carried, .event_type = IBV_EVENT_QP_ACCESS_ERR}};
	load(1, evs);
	struct ibv_async_event got;
	errno = 0;
	int ret = lip_async_filter(&ctx, &got, &ops);
	CHECK(ret == -1 && errno == EAGAIN && nacked == 1, "ret %d errno %d acked %d", ret, errno, nacked);
}

int main(void)
{
	CHECK(!lip_async_keepable(IBV_EVENT_CQ_ERR) && !lip_async_keepable(IBV_EVENT_PORT_ERR) &&
	          !lip_async_keepable(IBV_EVENT_PATH_MIG_ERR) && lip_async_keepable(IBV_EVENT_QP_FATAL),
	      "lip_async_keepable");
	test_keeps_carried();
	test_passes_bare();
	test_device_fatal();
	test_nonblocking();
	if (fails) {
		printf("asyncev_check: %d failed\n", fails);
		return 1;
	}
	printf("asyncev_check: ok\n");
	return 0;
}
