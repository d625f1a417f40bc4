/* A Majordomo client on plain libzmq, strict like the classic C clients, in either dialect: MDP/0.1 (ZeroMQ
 * RFC 7) or MDP/0.2 (RFC 18), chosen when it is compiled (-DMDP_DIALECT=1 or 2: tests/interop/build.py makes
 * mdp01_client and mdp02_client).
 *
 * It uses a DEALER socket (adding MDP/0.1's empty delimiter frame itself), so it can pipeline: with --pipeline it
 * sends every request before reading any reply. Request i has the one body frame "<prefix>-<i>". Each request
 * must get exactly --partials PARTIAL replies (MDP/0.2 only), the k-th being the echo with "#k" appended, then
 * one final echo (echoes optionally prefixed by a --tag); every reply must carry the request's header and
 * service (and in MDP/0.2 a known command), else the client fails. MDP has no request id, so pipelined replies
 * may come in any order. With --mmi it asks the broker's mmi.service instead and prints the answer.
 *
 * MDP/0.1 request and reply, after the DEALER's own frames: "", "MDPC01", service, body...
 * MDP/0.2 REQUEST: "MDPC02", 0x01, service, body...   PARTIAL / FINAL: "MDPC02", 0x02 / 0x03, service, body...
 * In both the reply's service is frame 2 and its (only) body frame 3.
 */
#include "mdp_common.h"

#ifndef MDP_DIALECT
#error "compile with -DMDP_DIALECT=1 (MDP/0.1) or -DMDP_DIALECT=2 (MDP/0.2)"
#endif
enum { MDP02 = MDP_DIALECT == 2 };
enum { REQUEST = 1, PARTIAL = 2, FINAL = 3 }; /* MDP/0.2's commands; an MDP/0.1 reply counts as a FINAL */
#define HEADER (MDP02 ? "MDPC02" : "MDPC01")
enum { BODY = 3 };

static void send_request(void *socket, const char *service, const char *body)
{
    if (!MDP02)
        send_str(socket, "", 1);
    send_str(socket, HEADER, 1);
    if (MDP02)
        send_byte(socket, REQUEST, 1);
    send_str(socket, service, 1);
    send_str(socket, body, 0);
}

/* Wait for the next reply and check its envelope; return its command (PARTIAL or FINAL). */
static int recv_reply(void *socket, const client_opts_t *opts, const char *service, msg_t *msg)
{
    if (!msg_recv(socket, msg, now_ms() + opts->timeout_ms))
        fail(EXIT_TIMEOUT, "timeout: no reply within %ld ms", opts->timeout_ms);
    int command = FINAL;
    if (MDP02) {
        if (!frame_is_str(msg, 0, HEADER))
            fail_msg(msg, "reply whose protocol header is not MDPC02");
        if (msg->size < 2 || frame_size(msg, 1) != 1)
            fail_msg(msg, "reply without a command frame");
        command = *(const unsigned char *)frame_data(msg, 1);
        if (command != PARTIAL && command != FINAL)
            fail_msg(msg, "reply with an unknown command");
    } else {
        if (!frame_is_str(msg, 0, ""))
            fail_msg(msg, "reply without the empty delimiter frame");
        if (!frame_is_str(msg, 1, HEADER))
            fail_msg(msg, "reply whose protocol header is not MDPC01");
    }
    if (!frame_is_str(msg, 2, service))
        fail_msg(msg, "reply for another service than the request's");
    if (msg->size != BODY + 1)
        fail_msg(msg, "reply without exactly one body frame");
    return command;
}

/* Ask mmi.service about a service; print "mmi.service SERVICE CODE". */
static void ask_mmi(void *socket, const client_opts_t *opts)
{
    msg_t msg;
    send_request(socket, "mmi.service", opts->mmi);
    if (recv_reply(socket, opts, "mmi.service", &msg) != FINAL)
        fail_msg(&msg, "MMI answered with a PARTIAL reply");
    if (frame_size(&msg, BODY) != 3)
        fail_msg(&msg, "MMI reply is not a 3-digit code");
    printf("mmi.service %s %.3s\n", opts->mmi, frame_data(&msg, BODY));
    msg_close(&msg);
}

/* Read replies until a final one, accounting for each; return the index of the request it answers. */
static long read_final(void *socket, tally_t *tally)
{
    for (;;) {
        msg_t msg;
        int final = recv_reply(socket, tally->opts, tally->opts->service, &msg) == FINAL;
        long index = final ? tally_final(tally, &msg, BODY) : tally_partial(tally, &msg, BODY);
        if (tally->opts->verbose)
            print_reply(!MDP02 ? "reply" : final ? "final" : "partial", &msg, BODY);
        msg_close(&msg);
        if (final)
            return index;
    }
}

int main(int argc, char **argv)
{
    progname = MDP02 ? "mdp02_client" : "mdp01_client";
    client_opts_t opts = client_options(argc, argv, MDP02);
    void *context = zmq_ctx_new();
    void *socket = zmq_socket(context, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(socket, opts.endpoint) != 0)
        fail(EXIT_USAGE, "cannot connect to %s: %s", opts.endpoint, zmq_strerror(zmq_errno()));

    if (opts.mmi) {
        ask_mmi(socket, &opts);
    } else {
        tally_t tally = tally_new(&opts);
        char body[256];
        for (long i = 0; i < opts.requests; i++) {
            snprintf(body, sizeof body, "%s-%ld", opts.prefix, i);
            send_request(socket, opts.service, body);
            if (!opts.pipeline && read_final(socket, &tally) != i)
                fail(EXIT_PROTOCOL, "reply to request %ld is the echo of another request", i);
        }
        while (tally.finals < opts.requests)
            read_final(socket, &tally);
        msg_t extra;
        if (opts.no_extra_ms && msg_recv(socket, &extra, now_ms() + opts.no_extra_ms))
            fail_msg(&extra, "unexpected extra reply after the last one");
        tally_finish(&tally);
    }
    zmq_close(socket);
    zmq_ctx_term(context);
    return 0;
}
