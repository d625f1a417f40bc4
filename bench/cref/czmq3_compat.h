/* bench/cref/czmq3_compat.h: lets the zguide's C Majordomo broker (examples/C/mdbroker.c, written for CZMQ 3)
 * build against CZMQ 4 (Debian's libczmq-dev), for the bench's reference row. Force-included (gcc -include);
 * the zguide sources themselves are never part of this repository. The broker binds $MDBROKER_ENDPOINT
 * instead of its hard-coded tcp://\*:5555 and logs nothing (its log calls write a line per message only with
 * -v, which the bench does not pass). */
#ifndef GENERALDOMO_CZMQ3_COMPAT_H
#define GENERALDOMO_CZMQ3_COMPAT_H
#include <czmq.h>
#include <stdlib.h>

typedef struct {
    int unused;
} zctx_t;

static inline zctx_t *zctx_new(void)
{
    return (zctx_t *)zmalloc(sizeof(zctx_t));
}

static inline void zctx_destroy(zctx_t **ctx)
{
    free(*ctx);
    *ctx = NULL;
}

static inline void *compat_socket(int type)
{
    void *socket = zsys_socket(type, __FILE__, __LINE__);
    int linger = 0;
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
    return socket;
}

static inline int compat_bind(void *socket, const char *fallback)
{
    const char *endpoint = getenv("MDBROKER_ENDPOINT");
    int rc = zmq_bind(socket, endpoint ? endpoint : fallback);
    if (rc == 0) {
        printf("bound %s\n", endpoint ? endpoint : fallback);
        fflush(stdout);
    }
    return rc;
}

#define zsocket_new(ctx, type) ((void)(ctx), compat_socket(type))
#define zsocket_bind(socket, endpoint) compat_bind((socket), (endpoint))
#define zclock_log(...) ((void)0)
#define zctx_interrupted zsys_interrupted
#endif
