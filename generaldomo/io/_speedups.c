/* generaldomo.io._speedups: the broker links' hot path in C (optional; see generaldomo/io/speedups.py).
 *
 * Rules: this file reads and writes whole messages and polls sockets, nothing else. It calls the libzmq that
 * pyzmq has already loaded (bind() looks the functions up in pyzmq's extension with dlopen(RTLD_NOLOAD), so
 * there is never a second libzmq in the process) and it needs no zmq.h at build time: the few types and
 * constants it uses are libzmq's stable ABI, declared below. Every read is bounded: at most `max_messages`
 * messages and about `batch_bytes` bytes per call, no frame kept beyond a message's frame or byte limit (the
 * rest of such a message is read and discarded at C speed). It never blocks except in poll(), which releases
 * the GIL. It knows nothing of the protocol: what the frames mean is decided in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

/* libzmq's ABI (zmq.h 4.x) */
typedef struct {
    unsigned char _[64];
} __attribute__((aligned(sizeof(void *)))) zmq_msg_t;
typedef struct {
    void *socket;
    int fd;
    short events;
    short revents;
} zmq_pollitem_t;
#define ZMQ_DONTWAIT 1
#define ZMQ_SNDMORE 2
#define ZMQ_POLLIN 1
#define MAX_POLL_ITEMS 64
#define LONG_PREFIX 0xFF /* codec: a length of 255 or more follows as 4 big-endian bytes */

/* what a dropped message broke, as router_recv reports it */
enum { TOO_MANY_FRAMES = 1, TOO_LARGE = 2 };
/* what server_recv reports instead of the frames of a part that does not unpack */
enum { DECODE_TOO_MANY = 1, DECODE_MALFORMED = 2 };

static int (*z_msg_init)(zmq_msg_t *);
static int (*z_msg_init_size)(zmq_msg_t *, size_t);
static int (*z_msg_recv)(zmq_msg_t *, void *, int);
static int (*z_msg_send)(zmq_msg_t *, void *, int);
static int (*z_msg_close)(zmq_msg_t *);
static void *(*z_msg_data)(zmq_msg_t *);
static size_t (*z_msg_size)(const zmq_msg_t *);
static int (*z_msg_more)(const zmq_msg_t *);
static uint32_t (*z_msg_routing_id)(zmq_msg_t *);
static int (*z_msg_set_routing_id)(zmq_msg_t *, uint32_t);
static int (*z_send)(void *, const void *, size_t, int);
static int (*z_poll)(zmq_pollitem_t *, int, long);
static int (*z_errno)(void);
static int bound = 0;
static PyObject *error_class = NULL; /* zmq.ZMQError, given to bind() */

typedef struct {
    const char *name;
    void **slot;
    int required;
} symbol_t;

static symbol_t symbols[] = {
    {"zmq_msg_init", (void **)&z_msg_init, 1},
    {"zmq_msg_init_size", (void **)&z_msg_init_size, 1},
    {"zmq_msg_recv", (void **)&z_msg_recv, 1},
    {"zmq_msg_send", (void **)&z_msg_send, 1},
    {"zmq_msg_close", (void **)&z_msg_close, 1},
    {"zmq_msg_data", (void **)&z_msg_data, 1},
    {"zmq_msg_size", (void **)&z_msg_size, 1},
    {"zmq_msg_more", (void **)&z_msg_more, 1},
    {"zmq_msg_routing_id", (void **)&z_msg_routing_id, 0}, /* draft API: the SERVER functions need them */
    {"zmq_msg_set_routing_id", (void **)&z_msg_set_routing_id, 0},
    {"zmq_send", (void **)&z_send, 1},
    {"zmq_poll", (void **)&z_poll, 1},
    {"zmq_errno", (void **)&z_errno, 1},
};

static PyObject *zmq_error(int code) {
    PyObject *args = Py_BuildValue("(i)", code);
    if (args != NULL) {
        PyErr_SetObject(error_class, args); /* zmq.ZMQError(errno) */
        Py_DECREF(args);
    }
    return NULL;
}

static int require_bound(void) {
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "generaldomo.io._speedups: bind() was not called");
        return 0;
    }
    return 1;
}

static void *socket_handle(PyObject *handle) {
    void *pointer = PyLong_AsVoidPtr(handle);
    if (pointer == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "a closed socket (null handle)");
    return pointer;
}

PyDoc_STRVAR(bind_doc, "bind(path, error_class) -> bool: use the libzmq already loaded with the shared object at "
                       "path; True if it has the draft API (routing ids). Raise OSError if path is not loaded.");

static PyObject *sp_bind(PyObject *self, PyObject *args) {
    const char *path;
    PyObject *errors;
    if (!PyArg_ParseTuple(args, "sO", &path, &errors))
        return NULL;
    void *library = dlopen(path, RTLD_NOW | RTLD_NOLOAD); /* never loads a second copy */
    if (library == NULL)
        return PyErr_Format(PyExc_OSError, "%s is not loaded in this process", path);
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].slot = dlsym(library, symbols[i].name);
        if (*symbols[i].slot == NULL && symbols[i].required)
            return PyErr_Format(PyExc_OSError, "the libzmq of %s lacks %s", path, symbols[i].name);
    }
    Py_XDECREF(error_class);
    Py_INCREF(errors);
    error_class = errors;
    bound = 1;
    return PyBool_FromLong(z_msg_routing_id != NULL && z_msg_set_routing_id != NULL);
}

PyDoc_STRVAR(poll_doc, "poll(handles, fds, timeout_ms) -> int: wait (GIL released) until one of the sockets or file "
                       "descriptors is readable or the timeout (-1: none) passes; bit i of the result is set if "
                       "handles[i] is readable, bit len(handles) + j if fds[j] is.");

static PyObject *sp_poll(PyObject *self, PyObject *args) {
    PyObject *handles, *fds;
    long timeout;
    zmq_pollitem_t items[MAX_POLL_ITEMS];
    if (!PyArg_ParseTuple(args, "O!O!l", &PyTuple_Type, &handles, &PyTuple_Type, &fds, &timeout) ||
        !require_bound())
        return NULL;
    Py_ssize_t sockets = PyTuple_GET_SIZE(handles), count = sockets + PyTuple_GET_SIZE(fds);
    if (count > MAX_POLL_ITEMS)
        return PyErr_Format(PyExc_ValueError, "at most %d sockets and file descriptors", MAX_POLL_ITEMS);
    for (Py_ssize_t i = 0; i < count; i++) {
        items[i].socket = NULL;
        items[i].fd = 0;
        if (i < sockets) {
            items[i].socket = socket_handle(PyTuple_GET_ITEM(handles, i));
        } else {
            items[i].fd = (int)PyLong_AsLong(PyTuple_GET_ITEM(fds, i - sockets));
        }
        if (PyErr_Occurred())
            return NULL;
        items[i].events = ZMQ_POLLIN;
        items[i].revents = 0;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = z_poll(items, (int)count, timeout);
    Py_END_ALLOW_THREADS if (rc < 0) {
        int code = z_errno();
        if (code != EINTR)
            return zmq_error(code);
        if (PyErr_CheckSignals() < 0) /* e.g. KeyboardInterrupt from the signal that woke us */
            return NULL;
        return PyLong_FromLong(0);
    }
    unsigned long long mask = 0;
    for (Py_ssize_t i = 0; i < count; i++)
        if (items[i].revents & ZMQ_POLLIN)
            mask |= 1ULL << i;
    return PyLong_FromUnsignedLongLong(mask);
}

/* Read and discard the rest of the message whose last frame read was `msg`; return the frames read. */
static Py_ssize_t discard_rest(void *socket, zmq_msg_t *msg) {
    Py_ssize_t count = 0;
    while (z_msg_more(msg)) {
        if (z_msg_recv(msg, socket, ZMQ_DONTWAIT) < 0)
            break;
        count++;
    }
    return count;
}

typedef struct {
    Py_ssize_t max_frames, max_bytes; /* after a ROUTER message's identity; SERVER: packed frames */
} limits_t;

/* Reads one message into a new object (what a batch holds), or returns NULL with *code set (EAGAIN: nothing to
 * read) or with a Python error. `msg` is initialised; *size grows by the bytes kept. */
typedef PyObject *(*reader_t)(void *socket, zmq_msg_t *msg, const limits_t *limits, Py_ssize_t *size, int *code);

/* The messages waiting on the socket of `handle`, read by `read_one`: at most max_messages, stopping once
 * batch_bytes were read. An error other than "nothing more" is raised only if it comes first. */
static PyObject *read_batch(PyObject *handle, Py_ssize_t max_messages, Py_ssize_t batch_bytes, reader_t read_one,
                            const limits_t *limits) {
    void *socket = socket_handle(handle);
    PyObject *batch = socket == NULL ? NULL : PyList_New(0);
    if (batch == NULL)
        return NULL;
    zmq_msg_t msg;
    z_msg_init(&msg);
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < max_messages && size < batch_bytes; i++) {
        int code = 0;
        PyObject *item = read_one(socket, &msg, limits, &size, &code);
        if (item == NULL) {
            if (PyErr_Occurred() || (code != EAGAIN && code != EINTR && PyList_GET_SIZE(batch) == 0)) {
                z_msg_close(&msg);
                Py_DECREF(batch);
                return PyErr_Occurred() ? NULL : zmq_error(code);
            }
            break;
        }
        int appended = PyList_Append(batch, item);
        Py_DECREF(item);
        if (appended < 0) {
            z_msg_close(&msg);
            Py_DECREF(batch);
            return NULL;
        }
    }
    z_msg_close(&msg);
    return batch;
}

/* One ROUTER message into a new list [identity, frame, ...], or a (kind, frames, identity) tuple if it breaks a
 * limit; NULL with *code set (EAGAIN: nothing to read) or with a Python error. `msg` is initialised. */
static PyObject *read_router_message(void *socket, zmq_msg_t *msg, const limits_t *limits, Py_ssize_t *size,
                                     int *code) {
    Py_ssize_t max_frames = limits->max_frames, max_bytes = limits->max_bytes;
    if (z_msg_recv(msg, socket, ZMQ_DONTWAIT) < 0) {
        *code = z_errno();
        return NULL;
    }
    PyObject *frames = PyList_New(0);
    PyObject *identity = PyBytes_FromStringAndSize(z_msg_data(msg), (Py_ssize_t)z_msg_size(msg));
    if (frames == NULL || identity == NULL || PyList_Append(frames, identity) < 0)
        goto failed;
    Py_ssize_t room = max_bytes, left = max_frames;
    while (z_msg_more(msg)) {
        if (z_msg_recv(msg, socket, ZMQ_DONTWAIT) < 0) { /* libzmq delivers a message whole: not expected */
            *code = z_errno();
            goto failed;
        }
        Py_ssize_t length = (Py_ssize_t)z_msg_size(msg);
        int kind = left <= 0 ? TOO_MANY_FRAMES : (length > room ? TOO_LARGE : 0);
        if (kind) {
            Py_ssize_t read = max_frames - left + 1 + discard_rest(socket, msg);
            Py_DECREF(frames);
            frames = Py_BuildValue("(inO)", kind, read, identity);
            Py_DECREF(identity);
            return frames;
        }
        PyObject *frame = PyBytes_FromStringAndSize(z_msg_data(msg), length);
        if (frame == NULL || PyList_Append(frames, frame) < 0) {
            Py_XDECREF(frame);
            discard_rest(socket, msg);
            goto failed;
        }
        Py_DECREF(frame);
        room -= length;
        left--;
        *size += length;
    }
    Py_DECREF(identity);
    return frames;
failed:
    Py_XDECREF(frames);
    Py_XDECREF(identity);
    return NULL;
}

PyDoc_STRVAR(router_recv_doc,
             "router_recv(handle, max_messages, max_frames, max_bytes, batch_bytes) -> list: the messages waiting on "
             "a ROUTER socket, without blocking: each a list [identity, frame, ...], or a tuple (kind, frames, "
             "identity) for one dropped for more than max_frames frames (kind 1) or max_bytes bytes (kind 2) after "
             "the identity. Stops after max_messages, or once batch_bytes bytes were read.");

static PyObject *sp_router_recv(PyObject *self, PyObject *args) {
    PyObject *handle;
    Py_ssize_t max_messages, batch_bytes;
    limits_t limits;
    if (!PyArg_ParseTuple(args, "Onnnn", &handle, &max_messages, &limits.max_frames, &limits.max_bytes,
                          &batch_bytes) ||
        !require_bound())
        return NULL;
    return read_batch(handle, max_messages, batch_bytes, read_router_message, &limits);
}

/* Borrow the bytes of a frame: a bytes object directly, anything else through the buffer protocol. */
static int frame_view(PyObject *frame, Py_buffer *view) {
    if (PyBytes_CheckExact(frame)) {
        view->obj = NULL;
        view->buf = PyBytes_AS_STRING(frame);
        view->len = PyBytes_GET_SIZE(frame);
        return 0;
    }
    return PyObject_GetBuffer(frame, view, PyBUF_SIMPLE);
}

static void frame_release(Py_buffer *view) {
    if (view->obj != NULL)
        PyBuffer_Release(view);
}

/* Whether every item of the fast sequence `frames` can be sent (checked before a message's first frame goes, so
 * that a bad frame never leaves half a message in the socket). */
static int sendable(PyObject *frames) {
    Py_ssize_t count = PySequence_Fast_GET_SIZE(frames);
    PyObject **items = PySequence_Fast_ITEMS(frames);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyBytes_CheckExact(items[i]) && !PyObject_CheckBuffer(items[i])) {
            PyErr_Format(PyExc_TypeError, "a frame must be bytes-like, not %.100s", Py_TYPE(items[i])->tp_name);
            return 0;
        }
    }
    return 1;
}

/* `frames` as a fast sequence of at least one sendable frame, or NULL with a Python error (`what` names it in
 * the ValueError for an empty one: "frame" or "hop"). */
static PyObject *message_frames(PyObject *frames, const char *what) {
    PyObject *sequence = PySequence_Fast(frames, "frames must be a sequence of bytes");
    if (sequence == NULL)
        return NULL;
    if (PySequence_Fast_GET_SIZE(sequence) == 0 || !sendable(sequence)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "a message needs at least one %s", what);
        Py_DECREF(sequence);
        return NULL;
    }
    return sequence;
}

/* Send every item of the sequence `frames` (a list or tuple), the last one with `last_flags`. 0 or an errno. */
static int send_frames(void *socket, PyObject *frames, int last_flags, int *failed) {
    Py_ssize_t count = PySequence_Fast_GET_SIZE(frames);
    PyObject **items = PySequence_Fast_ITEMS(frames);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_buffer view;
        if (frame_view(items[i], &view) < 0) {
            *failed = 1;
            return 0;
        }
        int rc = z_send(socket, view.buf, (size_t)view.len, i == count - 1 ? last_flags : ZMQ_SNDMORE | ZMQ_DONTWAIT);
        frame_release(&view);
        if (rc < 0)
            return z_errno();
    }
    return 0;
}

PyDoc_STRVAR(router_send_doc,
             "router_send(handle, route, frames) -> int: send the route's frames (a bytes identity, or a tuple of "
             "them) then frames, without blocking; 0, or the errno that refused the first frame (EAGAIN: the peer's "
             "queue is full; EHOSTUNREACH: it is gone). frames must not be empty.");

static PyObject *sp_router_send(PyObject *self, PyObject *args) {
    PyObject *handle, *route, *frames;
    if (!PyArg_ParseTuple(args, "OOO", &handle, &route, &frames) || !require_bound())
        return NULL;
    void *socket = socket_handle(handle);
    PyObject *sequence = socket == NULL ? NULL : message_frames(frames, "frame");
    if (sequence == NULL)
        return NULL;
    int failed = 0, code;
    if (PyBytes_CheckExact(route)) {
        code = z_send(socket, PyBytes_AS_STRING(route), (size_t)PyBytes_GET_SIZE(route), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        code = code < 0 ? z_errno() : 0;
    } else {
        PyObject *hops = message_frames(route, "hop");
        if (hops == NULL) {
            Py_DECREF(sequence);
            return NULL;
        }
        code = send_frames(socket, hops, ZMQ_SNDMORE | ZMQ_DONTWAIT, &failed);
        Py_DECREF(hops);
    }
    if (code == 0 && !failed) /* past the first frame the message is the peer's: libzmq takes the rest */
        code = send_frames(socket, sequence, ZMQ_DONTWAIT, &failed);
    Py_DECREF(sequence);
    return failed ? NULL : PyLong_FromLong(code);
}

PyDoc_STRVAR(send_multipart_doc, "send_multipart(handle, frames) -> int: send frames as one message without blocking "
                                 "(a DEALER's); 0, or the errno that refused the first frame (EAGAIN: the queue "
                                 "is full). frames must not be empty.");

static PyObject *sp_send_multipart(PyObject *self, PyObject *args) {
    PyObject *handle, *frames;
    if (!PyArg_ParseTuple(args, "OO", &handle, &frames) || !require_bound())
        return NULL;
    void *socket = socket_handle(handle);
    PyObject *sequence = socket == NULL ? NULL : message_frames(frames, "frame");
    if (sequence == NULL)
        return NULL;
    int failed = 0;
    int code = send_frames(socket, sequence, ZMQ_DONTWAIT, &failed);
    Py_DECREF(sequence);
    return failed ? NULL : PyLong_FromLong(code);
}

/* ----------------------------------------------------------------------------- the frame-packing codec */

/* The size of the packing of `frames` (a fast sequence), or -1 with a Python error. */
static Py_ssize_t encoded_size(PyObject *frames) {
    Py_ssize_t count = PySequence_Fast_GET_SIZE(frames), total = 0;
    PyObject **items = PySequence_Fast_ITEMS(frames);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t length;
        if (PyBytes_CheckExact(items[i])) {
            length = PyBytes_GET_SIZE(items[i]);
        } else {
            Py_buffer view;
            if (PyObject_GetBuffer(items[i], &view, PyBUF_SIMPLE) < 0)
                return -1;
            length = view.len;
            PyBuffer_Release(&view);
        }
        if ((unsigned long long)length > 0xFFFFFFFFULL) {
            PyErr_Format(PyExc_ValueError, "frame of %zd bytes is too large to encode", length);
            return -1;
        }
        total += length + (length < LONG_PREFIX ? 1 : 5);
    }
    return total;
}

/* Write the packing of `frames` into `out` (encoded_size bytes). */
static int encode_into(PyObject *frames, unsigned char *out) {
    Py_ssize_t count = PySequence_Fast_GET_SIZE(frames);
    PyObject **items = PySequence_Fast_ITEMS(frames);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_buffer view;
        if (frame_view(items[i], &view) < 0)
            return -1;
        size_t length = (size_t)view.len;
        if (length < LONG_PREFIX) {
            *out++ = (unsigned char)length;
        } else {
            *out++ = LONG_PREFIX;
            *out++ = (unsigned char)(length >> 24);
            *out++ = (unsigned char)(length >> 16);
            *out++ = (unsigned char)(length >> 8);
            *out++ = (unsigned char)length;
        }
        memcpy(out, view.buf, length);
        out += length;
        frame_release(&view);
    }
    return 0;
}

PyDoc_STRVAR(encode_doc, "encode(frames) -> bytes: generaldomo.sansio.codec.encode in C.");

static PyObject *sp_encode(PyObject *self, PyObject *frames) {
    PyObject *sequence = PySequence_Fast(frames, "frames must be a sequence");
    if (sequence == NULL)
        return NULL;
    Py_ssize_t size = encoded_size(sequence);
    PyObject *packed = size < 0 ? NULL : PyBytes_FromStringAndSize(NULL, size);
    if (packed != NULL && encode_into(sequence, (unsigned char *)PyBytes_AS_STRING(packed)) < 0)
        Py_CLEAR(packed);
    Py_DECREF(sequence);
    return packed;
}

/* Unpack `length` bytes at `data` into a new list; NULL with *problem set (DECODE_TOO_MANY: more than
 * max_frames frames, max_frames < 0 meaning no limit; DECODE_MALFORMED, at *where) or with a Python error. */
static PyObject *decode_frames(const unsigned char *data, Py_ssize_t length, Py_ssize_t max_frames, int *problem,
                               Py_ssize_t *where) {
    PyObject *frames = PyList_New(0);
    Py_ssize_t pos = 0, left = max_frames;
    while (frames != NULL && pos < length) {
        if (left == 0) {
            *problem = DECODE_TOO_MANY;
            break;
        }
        left--;
        *where = pos;
        Py_ssize_t size = data[pos++];
        if (size == LONG_PREFIX) {
            if (length - pos < 4) {
                *problem = DECODE_MALFORMED;
                break;
            }
            size = ((Py_ssize_t)data[pos] << 24) | (data[pos + 1] << 16) | (data[pos + 2] << 8) | data[pos + 3];
            pos += 4;
        }
        if (size > length - pos) {
            *problem = DECODE_MALFORMED;
            break;
        }
        PyObject *frame = PyBytes_FromStringAndSize((const char *)data + pos, size);
        if (frame == NULL || PyList_Append(frames, frame) < 0)
            Py_CLEAR(frames);
        Py_XDECREF(frame);
        pos += size;
    }
    if (*problem)
        Py_CLEAR(frames);
    return frames;
}

PyDoc_STRVAR(decode_doc, "decode(data, max_frames, too_many, malformed) -> list: generaldomo.sansio.codec.decode in C "
                         "(max_frames -1: no limit), raising too_many or malformed, the codec's error classes.");

static PyObject *sp_decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t max_frames;
    PyObject *too_many, *malformed;
    if (!PyArg_ParseTuple(args, "y*nOO", &view, &max_frames, &too_many, &malformed))
        return NULL;
    int problem = 0;
    Py_ssize_t where = 0;
    PyObject *frames = decode_frames(view.buf, view.len, max_frames, &problem, &where);
    PyBuffer_Release(&view);
    if (problem == DECODE_TOO_MANY)
        PyErr_Format(too_many, "more than %zd frames", max_frames);
    else if (problem == DECODE_MALFORMED)
        PyErr_Format(malformed, "truncated or overlong frame at byte %zd", where);
    return frames;
}

/* ----------------------------------------------------------------------------- SERVER sockets (draft API) */

static int require_draft(void) {
    if (z_msg_routing_id == NULL || z_msg_set_routing_id == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this libzmq has no draft API (routing ids)");
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(server_recv_doc,
             "server_recv(handle, max_messages, max_frames, batch_bytes) -> list: the messages waiting on a SERVER "
             "socket, without blocking, each (routing_id, frames) unpacked by the codec, or (routing_id, problem) "
             "when the part does not unpack (1: more than max_frames frames, 2: malformed). Stops after "
             "max_messages, or once batch_bytes bytes were read.");

/* One SERVER part, unpacked: (routing_id, frames), or (routing_id, problem) when it does not unpack. */
static PyObject *read_server_message(void *socket, zmq_msg_t *msg, const limits_t *limits, Py_ssize_t *size,
                                     int *code) {
    if (z_msg_recv(msg, socket, ZMQ_DONTWAIT) < 0) {
        *code = z_errno();
        return NULL;
    }
    Py_ssize_t length = (Py_ssize_t)z_msg_size(msg), where = 0;
    *size += length;
    int problem = 0;
    PyObject *frames = decode_frames(z_msg_data(msg), length, limits->max_frames, &problem, &where);
    unsigned long routing_id = (unsigned long)z_msg_routing_id(msg);
    if (frames != NULL)
        return Py_BuildValue("(kN)", routing_id, frames);
    return problem ? Py_BuildValue("(ki)", routing_id, problem) : NULL;
}

static PyObject *sp_server_recv(PyObject *self, PyObject *args) {
    PyObject *handle;
    Py_ssize_t max_messages, batch_bytes;
    limits_t limits = {0, 0};
    if (!PyArg_ParseTuple(args, "Onnn", &handle, &max_messages, &limits.max_frames, &batch_bytes) ||
        !require_bound() || !require_draft())
        return NULL;
    return read_batch(handle, max_messages, batch_bytes, read_server_message, &limits);
}

PyDoc_STRVAR(server_send_doc, "server_send(handle, routing_id, frames) -> int: pack frames with the codec into one "
                              "part and send it to routing_id (0: none, from a CLIENT socket) without blocking; 0 or "
                              "the errno that refused it.");

static PyObject *sp_server_send(PyObject *self, PyObject *args) {
    PyObject *handle, *frames;
    unsigned long routing_id;
    if (!PyArg_ParseTuple(args, "OkO", &handle, &routing_id, &frames) || !require_bound() || !require_draft())
        return NULL;
    void *socket = socket_handle(handle);
    PyObject *sequence = socket == NULL ? NULL : PySequence_Fast(frames, "frames must be a sequence");
    if (sequence == NULL)
        return NULL;
    Py_ssize_t size = encoded_size(sequence);
    zmq_msg_t msg;
    if (size < 0 || z_msg_init_size(&msg, (size_t)size) < 0) {
        Py_DECREF(sequence);
        return size < 0 ? NULL : PyErr_NoMemory();
    }
    int code = 0;
    if (encode_into(sequence, z_msg_data(&msg)) < 0) {
        z_msg_close(&msg);
        Py_DECREF(sequence);
        return NULL;
    }
    Py_DECREF(sequence);
    if ((routing_id != 0 && z_msg_set_routing_id(&msg, (uint32_t)routing_id) < 0) ||
        z_msg_send(&msg, socket, ZMQ_DONTWAIT) < 0) {
        code = z_errno();
        z_msg_close(&msg); /* libzmq keeps ownership only of a message it sent */
    }
    return PyLong_FromLong(code);
}

static PyMethodDef methods[] = {
    {"bind", sp_bind, METH_VARARGS, bind_doc},
    {"poll", sp_poll, METH_VARARGS, poll_doc},
    {"router_recv", sp_router_recv, METH_VARARGS, router_recv_doc},
    {"router_send", sp_router_send, METH_VARARGS, router_send_doc},
    {"send_multipart", sp_send_multipart, METH_VARARGS, send_multipart_doc},
    {"server_recv", sp_server_recv, METH_VARARGS, server_recv_doc},
    {"server_send", sp_server_send, METH_VARARGS, server_send_doc},
    {"encode", sp_encode, METH_O, encode_doc},
    {"decode", sp_decode, METH_VARARGS, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "generaldomo.io._speedups",
    .m_doc = "The broker links' hot path in C (see speedups.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
