/* What the test Majordomo peers share: messages as arrays of frames, a monotonic clock, dying loudly,
 * command-line options, and the client's bookkeeping of which request each echoed reply answers.
 *
 * Header-only (every function is static inline). Exit codes of every peer: 0 success, 1 protocol or
 * verification error, 2 bad usage, 3 timeout. Diagnostics go to stderr, results to stdout.
 */
#ifndef MDP_COMMON_H
#define MDP_COMMON_H

#define _POSIX_C_SOURCE 200809L

#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

enum { EXIT_PROTOCOL = 1, EXIT_USAGE = 2, EXIT_TIMEOUT = 3 };
enum { MAX_FRAMES = 32, MAX_TAGS = 8 };

static const char *progname = "mdp-peer";

/* ------------------------------------------------------------------------------------------ dying loudly */

__attribute__((noreturn, format(printf, 2, 3))) static inline void fail(int code, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "%s: ", progname);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
    exit(code);
}

/* Print bytes readably: printable ASCII as is, anything else as \xHH; long frames are cut. */
static inline void print_bytes(FILE *out, const void *data, size_t size)
{
    const unsigned char *bytes = data;
    for (size_t i = 0; i < size && i < 80; i++)
        fprintf(out, bytes[i] >= 32 && bytes[i] < 127 && bytes[i] != '\\' ? "%c" : "\\x%02x", bytes[i]);
    if (size > 80)
        fprintf(out, "...(%zu bytes)", size);
}

/* ------------------------------------------------------------------------------------------ clock */

static inline int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* ------------------------------------------------------------------------------------------ messages */

typedef struct {
    int size;
    zmq_msg_t frame[MAX_FRAMES];
} msg_t;

static inline size_t frame_size(msg_t *msg, int i) { return zmq_msg_size(&msg->frame[i]); }
static inline const char *frame_data(msg_t *msg, int i) { return zmq_msg_data(&msg->frame[i]); }

static inline int frame_is(msg_t *msg, int i, const void *data, size_t size)
{
    return i < msg->size && frame_size(msg, i) == size && memcmp(frame_data(msg, i), data, size) == 0;
}

static inline int frame_is_str(msg_t *msg, int i, const char *text) { return frame_is(msg, i, text, strlen(text)); }

static inline void msg_close(msg_t *msg)
{
    for (int i = 0; i < msg->size; i++)
        zmq_msg_close(&msg->frame[i]);
    msg->size = 0;
}

/* Fail with a message followed by every frame of msg. */
__attribute__((noreturn)) static inline void fail_msg(msg_t *msg, const char *what)
{
    fprintf(stderr, "%s: %s; the message had %d frames:\n", progname, what, msg->size);
    for (int i = 0; i < msg->size; i++) {
        fprintf(stderr, "  [%d] ", i);
        print_bytes(stderr, frame_data(msg, i), frame_size(msg, i));
        fputc('\n', stderr);
    }
    exit(EXIT_PROTOCOL);
}

/* Receive one whole multipart message before the deadline (ms on now_ms's clock; -1: wait forever).
 * Return 1, or 0 if the deadline passed first. */
static inline int msg_recv(void *socket, msg_t *msg, int64_t deadline)
{
    zmq_pollitem_t item = {socket, 0, ZMQ_POLLIN, 0};
    for (;;) {
        long timeout = deadline < 0 ? -1 : deadline - now_ms();
        if (deadline >= 0 && timeout < 0)
            timeout = 0;
        int ready = zmq_poll(&item, 1, timeout);
        if (ready > 0)
            break;
        if (ready == 0 && deadline >= 0 && now_ms() >= deadline)
            return 0;
        if (ready < 0 && zmq_errno() != EINTR)
            fail(EXIT_PROTOCOL, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    }
    msg->size = 0;
    for (int more = 1; more; msg->size++) {
        if (msg->size == MAX_FRAMES)
            fail_msg(msg, "message with too many frames");
        zmq_msg_t *frame = &msg->frame[msg->size];
        zmq_msg_init(frame);
        if (zmq_msg_recv(frame, socket, 0) < 0)
            fail(EXIT_PROTOCOL, "zmq_msg_recv: %s", zmq_strerror(zmq_errno()));
        more = zmq_msg_more(frame);
    }
    return 1;
}

static inline void send_frame(void *socket, const void *data, size_t size, int more)
{
    while (zmq_send(socket, data, size, more ? ZMQ_SNDMORE : 0) < 0)
        if (zmq_errno() != EINTR)
            fail(EXIT_PROTOCOL, "zmq_send: %s", zmq_strerror(zmq_errno()));
}

static inline void send_str(void *socket, const char *text, int more) { send_frame(socket, text, strlen(text), more); }

static inline void send_byte(void *socket, int command, int more)
{
    unsigned char byte = (unsigned char)command;
    send_frame(socket, &byte, 1, more);
}

/* Send the frames [first, msg->size) of msg; the first of them prefixed with prefix and suffixed with suffix. */
static inline void send_body(void *socket, msg_t *msg, int first, const char *prefix, const char *suffix)
{
    size_t size = first < msg->size ? frame_size(msg, first) : 0;
    char *head = malloc(strlen(prefix) + size + strlen(suffix) + 1);
    if (!head)
        fail(EXIT_PROTOCOL, "out of memory");
    strcpy(head, prefix);
    if (size)
        memcpy(head + strlen(prefix), frame_data(msg, first), size);
    strcpy(head + strlen(prefix) + size, suffix);
    send_frame(socket, head, strlen(prefix) + size + strlen(suffix), first + 1 < msg->size);
    free(head);
    for (int i = first + 1; i < msg->size; i++)
        send_frame(socket, frame_data(msg, i), frame_size(msg, i), i + 1 < msg->size);
}

/* ------------------------------------------------------------------------------------------ options */

static inline long parse_count(const char *text, const char *option)
{
    char *end;
    long value = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || value < 0)
        fail(EXIT_USAGE, "%s wants a non-negative integer, not '%s'", option, text);
    return value;
}

typedef struct {
    const char *endpoint;
    const char *service;
    const char *tag;     /* prepended to the first frame of every reply */
    long count;          /* exit after this many requests (0: never) */
    long delay_ms;       /* work time per request (heartbeating meanwhile) */
    long heartbeat_ms;
    long liveness;       /* broker heartbeats missed before reconnecting */
    long reconnect_ms;   /* pause before reconnecting to a silent broker */
    long partials;       /* PARTIAL replies before the FINAL (MDP/0.2) */
    int delimiter;       /* MDP/0.2: every message starts with an empty frame, as majortomo's broker expects */
    int verbose;         /* print a line per request received and replied to */
    int sink;            /* reply with the body's size in decimal instead of echoing it (the bench's large payloads) */
} worker_opts_t;

static inline void worker_usage(int partials)
{
    fprintf(stderr,
            "usage: %s [options] ENDPOINT\n"
            "  --service NAME       service to serve (default echo)\n"
            "  --tag TEXT           prepend TEXT to the first frame of each reply\n"
            "  --count N            exit after N requests (default: never)\n"
            "  --delay-ms MS        work MS milliseconds per request (default 0)\n"
            "  --heartbeat-ms MS    heartbeat interval (default 2500)\n"
            "  --liveness N         reconnect after N missed broker heartbeats (default 3)\n"
            "  --reconnect-ms MS    pause before reconnecting to a silent broker (default 2500)\n"
            "%s"
            "  --sink               reply with the request body's size in bytes (decimal) instead of the body\n"
            "  -v, --verbose        print a line per request and reply\n",
            progname,
            partials ? "  --partials N         send N PARTIAL replies before the FINAL (default 0)\n"
                       "  --delimiter          start every message with an empty frame (majortomo's MDP/0.2)\n"
                     : "");
    exit(EXIT_USAGE);
}

/* A reply's body: the request's body from frame `first` on (the first one between --tag and `suffix`), or with
 * --sink its size in bytes, in decimal. */
static inline void send_reply_body(void *socket, msg_t *msg, int first, const worker_opts_t *opts, const char *suffix)
{
    if (!opts->sink) {
        send_body(socket, msg, first, opts->tag, suffix);
        return;
    }
    size_t total = 0;
    for (int i = first; i < msg->size; i++)
        total += frame_size(msg, i);
    char size[32];
    snprintf(size, sizeof size, "%zu", total);
    send_str(socket, size, 0);
}

static inline worker_opts_t worker_options(int argc, char **argv, int partials)
{
    worker_opts_t opts = {NULL, "echo", "", 0, 0, 2500, 3, 2500, 0, 0, 0, 0};
    static const struct option long_options[] = {
        {"service", required_argument, 0, 's'},      {"tag", required_argument, 0, 't'},
        {"count", required_argument, 0, 'n'},        {"delay-ms", required_argument, 0, 'd'},
        {"heartbeat-ms", required_argument, 0, 'h'}, {"liveness", required_argument, 0, 'l'},
        {"reconnect-ms", required_argument, 0, 'r'}, {"partials", required_argument, 0, 'p'},
        {"delimiter", no_argument, 0, 'e'},          {"verbose", no_argument, 0, 'v'},
        {"sink", no_argument, 0, 'k'},               {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "v", long_options, NULL)) != -1) {
        switch (c) {
        case 's': opts.service = optarg; break;
        case 't': opts.tag = optarg; break;
        case 'n': opts.count = parse_count(optarg, "--count"); break;
        case 'd': opts.delay_ms = parse_count(optarg, "--delay-ms"); break;
        case 'h': opts.heartbeat_ms = parse_count(optarg, "--heartbeat-ms"); break;
        case 'l': opts.liveness = parse_count(optarg, "--liveness"); break;
        case 'r': opts.reconnect_ms = parse_count(optarg, "--reconnect-ms"); break;
        case 'p':
            if (!partials)
                worker_usage(partials);
            opts.partials = parse_count(optarg, "--partials");
            break;
        case 'e':
            if (!partials)
                worker_usage(partials);
            opts.delimiter = 1;
            break;
        case 'v': opts.verbose = 1; break;
        case 'k': opts.sink = 1; break;
        default: worker_usage(partials);
        }
    }
    if (optind != argc - 1 || opts.heartbeat_ms == 0 || opts.liveness == 0)
        worker_usage(partials);
    opts.endpoint = argv[optind];
    return opts;
}

typedef struct {
    const char *endpoint;
    const char *service;
    const char *prefix;  /* request bodies are "<prefix>-<i>" */
    long requests;
    const char *tags[MAX_TAGS];
    int ntags;           /* a reply must be "<tag><request body>" for one of these; none given: the exact echo */
    int pipeline;        /* send every request, then read every reply */
    long timeout_ms;     /* longest wait for any one reply */
    long no_extra_ms;    /* after the last reply, fail if anything arrives within this time */
    const char *mmi;     /* ask mmi.service about this service instead */
    long partials;       /* PARTIAL replies expected before each FINAL (MDP/0.2) */
    int verbose;         /* print every reply */
} client_opts_t;

static inline void client_usage(int partials)
{
    fprintf(stderr,
            "usage: %s [options] ENDPOINT\n"
            "  --service NAME         service to ask (default echo)\n"
            "  --requests N           requests to send (default 1)\n"
            "  --prefix TEXT          request bodies are TEXT-0, TEXT-1, ... (default req)\n"
            "  --tag TEXT             replies are TEXT + the request body (repeatable: any of them)\n"
            "  --pipeline             send all requests first, then read all replies\n"
            "  --timeout-ms MS        fail if a reply takes longer (default 10000)\n"
            "  --check-no-extra MS    after the last reply, fail if another arrives within MS\n"
            "  --mmi SERVICE          ask mmi.service whether SERVICE has workers; print the code\n"
            "%s"
            "  -v, --verbose          print every reply\n",
            progname, partials ? "  --partials N           expect N PARTIAL replies before each FINAL\n" : "");
    exit(EXIT_USAGE);
}

static inline client_opts_t client_options(int argc, char **argv, int partials)
{
    client_opts_t opts = {NULL, "echo", "req", 1, {0}, 0, 0, 10000, 0, NULL, 0, 0};
    static const struct option long_options[] = {
        {"service", required_argument, 0, 's'},  {"requests", required_argument, 0, 'n'},
        {"prefix", required_argument, 0, 'x'},   {"tag", required_argument, 0, 't'},
        {"pipeline", no_argument, 0, 'P'},       {"timeout-ms", required_argument, 0, 'T'},
        {"check-no-extra", required_argument, 0, 'e'}, {"mmi", required_argument, 0, 'm'},
        {"partials", required_argument, 0, 'p'}, {"verbose", no_argument, 0, 'v'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "v", long_options, NULL)) != -1) {
        switch (c) {
        case 's': opts.service = optarg; break;
        case 'n': opts.requests = parse_count(optarg, "--requests"); break;
        case 'x': opts.prefix = optarg; break;
        case 't':
            if (opts.ntags == MAX_TAGS)
                fail(EXIT_USAGE, "at most %d --tag options", MAX_TAGS);
            opts.tags[opts.ntags++] = optarg;
            break;
        case 'P': opts.pipeline = 1; break;
        case 'T': opts.timeout_ms = parse_count(optarg, "--timeout-ms"); break;
        case 'e': opts.no_extra_ms = parse_count(optarg, "--check-no-extra"); break;
        case 'm': opts.mmi = optarg; break;
        case 'p':
            if (!partials)
                client_usage(partials);
            opts.partials = parse_count(optarg, "--partials");
            break;
        case 'v': opts.verbose = 1; break;
        default: client_usage(partials);
        }
    }
    if (optind != argc - 1)
        client_usage(partials);
    opts.endpoint = argv[optind];
    return opts;
}

/* ------------------------------------------------------------------------------------------ the client's tally */

/* Which requests have had their final reply, and how many partial replies each has had. */
typedef struct {
    const client_opts_t *opts;
    char *final;         /* per request: 1 once its final reply came */
    long *partials;      /* per request: partial replies so far */
    long by_tag[MAX_TAGS];
    long finals, partials_total;
} tally_t;

static inline tally_t tally_new(const client_opts_t *opts)
{
    tally_t tally = {opts, calloc(opts->requests + 1, 1), calloc(opts->requests + 1, sizeof(long)), {0}, 0, 0};
    if (!tally.final || !tally.partials)
        fail(EXIT_PROTOCOL, "out of memory");
    return tally;
}

/* The index i of the request whose echo the bytes are ("<tag><prefix>-<i>", for one allowed tag), or -1. */
static inline long tally_match(const tally_t *tally, const char *data, size_t size, int *tag)
{
    const client_opts_t *opts = tally->opts;
    for (*tag = 0; *tag < (opts->ntags ? opts->ntags : 1); (*tag)++) {
        const char *want = opts->ntags ? opts->tags[*tag] : "";
        size_t tag_len = strlen(want), prefix_len = strlen(opts->prefix);
        if (size < tag_len + prefix_len + 2 || memcmp(data, want, tag_len) != 0 ||
            memcmp(data + tag_len, opts->prefix, prefix_len) != 0 || data[tag_len + prefix_len] != '-')
            continue;
        const char *digits = data + tag_len + prefix_len + 1;
        size_t ndigits = size - (digits - data);
        if (ndigits > 9 || (digits[0] == '0' && ndigits > 1))
            continue;
        long index = 0;
        for (size_t i = 0; i < ndigits && index >= 0; i++)
            index = digits[i] >= '0' && digits[i] <= '9' ? index * 10 + (digits[i] - '0') : -1;
        if (index >= 0 && index < opts->requests)
            return index;
    }
    return -1;
}

/* Account for a final reply whose one body frame is the given bytes; fail unless it is the echo of a request
 * that has had all its partial replies and no final one. Return the request's index. */
static inline long tally_final(tally_t *tally, msg_t *msg, int body)
{
    int tag;
    long index = tally_match(tally, frame_data(msg, body), frame_size(msg, body), &tag);
    if (index < 0)
        fail_msg(msg, "reply body is not the echo of any request");
    if (tally->final[index])
        fail_msg(msg, "second final reply to one request");
    if (tally->partials[index] != tally->opts->partials)
        fail_msg(msg, "final reply before all partial replies");
    tally->final[index] = 1;
    tally->by_tag[tag]++;
    tally->finals++;
    return index;
}

/* Account for a partial reply ("<echo>#<k>", k counting from 1 per request); fail unless it is the next one
 * of a request without its final reply. Return the request's index. */
static inline long tally_partial(tally_t *tally, msg_t *msg, int body)
{
    const char *data = frame_data(msg, body);
    size_t size = frame_size(msg, body);
    const char *hash = size ? memchr(data, '#', size) : NULL;
    int tag;
    long index = hash ? tally_match(tally, data, hash - data, &tag) : -1;
    if (index < 0)
        fail_msg(msg, "partial reply body is not '<echo of a request>#<k>'");
    if (tally->final[index] || tally->partials[index] >= tally->opts->partials)
        fail_msg(msg, "unexpected partial reply");
    char want[32];
    snprintf(want, sizeof want, "#%ld", tally->partials[index] + 1);
    if (size - (hash - data) != strlen(want) || memcmp(hash, want, strlen(want)) != 0)
        fail_msg(msg, "partial reply out of order");
    tally->partials[index]++;
    tally->partials_total++;
    return index;
}

/* Print the one-line summary, "ok N replies[, P partials][ (tag=count, ...)]", and free the tally. */
static inline void tally_finish(tally_t *tally)
{
    printf("ok %ld replies", tally->finals);
    if (tally->opts->partials)
        printf(", %ld partials", tally->partials_total);
    for (int i = 0; i < tally->opts->ntags; i++)
        printf("%s%s=%ld%s", i ? ", " : " (", tally->opts->tags[i], tally->by_tag[i],
               i + 1 == tally->opts->ntags ? ")" : "");
    printf("\n");
    fflush(stdout);
    free(tally->final);
    free(tally->partials);
}

/* Print a reply line in verbose mode: "<kind> <first body frame>". */
static inline void print_reply(const char *kind, msg_t *msg, int body)
{
    printf("%s ", kind);
    print_bytes(stdout, frame_data(msg, body), frame_size(msg, body));
    printf("\n");
    fflush(stdout);
}

#endif
