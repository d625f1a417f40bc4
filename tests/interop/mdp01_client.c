/* A Majordomo MDP/0.1 client (ZeroMQ RFC 7) on plain libzmq, strict like the classic C clients.
 *
 * It uses a DEALER socket and adds the empty delimiter frame itself, so it can pipeline: with --pipeline it
 * sends every request before reading any reply. Request i has the one body frame "<prefix>-<i>"; each reply
 * must carry the same header and service, and a body that echoes a request not answered yet (optionally
 * prefixed by a --tag), else the client fails. MDP/0.1 has no request id, so pipelined replies may come in
 * any order. With --mmi it asks the broker's mmi.service instead and prints the answer.
 *
 * Request and reply, after the DEALER's own frames: "", "MDPC01", service, body...
 */
#include "mdp_common.h"

#define HEADER "MDPC01"

static void send_request(void *socket, const char *service, const char *body)
{
    send_str(socket, "", 1);
    send_str(socket, HEADER, 1);
    send_str(socket, service, 1);
    send_str(socket, body, 0);
}

/* Wait for the next reply and check its envelope; return the index of its (only) body frame. */
static int recv_reply(void *socket, const client_opts_t *opts, const char *service, msg_t *msg)
{
    if (!msg_recv(socket, msg, now_ms() + opts->timeout_ms))
        fail(EXIT_TIMEOUT, "timeout: no reply within %ld ms", opts->timeout_ms);
    if (!frame_is_str(msg, 0, ""))
        fail_msg(msg, "reply without the empty delimiter frame");
    if (!frame_is_str(msg, 1, HEADER))
        fail_msg(msg, "reply whose protocol header is not " HEADER);
    if (!frame_is_str(msg, 2, service))
        fail_msg(msg, "reply for another service than the request's");
    if (msg->size != 4)
        fail_msg(msg, "reply without exactly one body frame");
    return 3;
}

/* Ask mmi.service about a service; print "mmi.service SERVICE CODE". */
static void ask_mmi(void *socket, const client_opts_t *opts)
{
    msg_t msg;
    send_request(socket, "mmi.service", opts->mmi);
    int body = recv_reply(socket, opts, "mmi.service", &msg);
    if (frame_size(&msg, body) != 3)
        fail_msg(&msg, "MMI reply is not a 3-digit code");
    printf("mmi.service %s %.3s\n", opts->mmi, frame_data(&msg, body));
    msg_close(&msg);
}

/* Read one reply and account for it; return the index of the request it answers. */
static long read_reply(void *socket, tally_t *tally)
{
    msg_t msg;
    int body = recv_reply(socket, tally->opts, tally->opts->service, &msg);
    long index = tally_final(tally, &msg, body);
    if (tally->opts->verbose)
        print_reply("reply", &msg, body);
    msg_close(&msg);
    return index;
}

int main(int argc, char **argv)
{
    progname = "mdp01_client";
    client_opts_t opts = client_options(argc, argv, 0);
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
            if (!opts.pipeline && read_reply(socket, &tally) != i)
                fail(EXIT_PROTOCOL, "reply to request %ld is the echo of another request", i);
        }
        while (tally.finals < opts.requests)
            read_reply(socket, &tally);
        msg_t extra;
        if (opts.no_extra_ms && msg_recv(socket, &extra, now_ms() + opts.no_extra_ms))
            fail_msg(&extra, "unexpected extra reply after the last one");
        tally_finish(&tally);
    }
    zmq_close(socket);
    zmq_ctx_term(context);
    return 0;
}
