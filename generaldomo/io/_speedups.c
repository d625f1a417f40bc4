/* generaldomo.io._speedups: the broker links' hot path in C (optional; see generaldomo/io/speedups.py).
 *
 * Rules: this file reads and writes whole messages and polls sockets, nothing else. It calls the libzmq that
 * pyzmq has already loaded (bind() looks the functions up in pyzmq's extension with dlopen(RTLD_NOLOAD), so
 * there is never a second libzmq in the process) and it needs no zmq.h at build time: the few types and
 * constants it uses are libzmq's stable ABI, declared below. Every read is bounded: at most `max_messages`
 * messages and about `batch_bytes` bytes per call, no frame kept beyond a message's frame or byte limit (the
 * rest of such a message is read and discarded at C speed). It never blocks except in poll(), which releases
 * the GIL. It knows nothing of the protocol: what the frames mean is decided in Python. A CURVE link's read also
 * returns each message's User-Id metadata (the sender's key, set by the ZAP handler); what it allows is decided
 * in Python too (generaldomo/io/hub/links.py, Link.credential).
 *
 * Frames kept by reference: a link's read may be asked to keep frames of `keep_min` bytes or more in the message
 * libzmq received instead of copying them into bytes objects; such a frame is a read-only memoryview of a
 * KeptFrame, which holds the received message (one for all the frames of a SERVER part), and a send of it (or of a
 * slice of it) hands libzmq a message that points at the same bytes, released (from any thread, without the GIL)
 * once libzmq is done with it. So a large payload passes through the broker without a copy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
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
#define ZMQ_EVENTS 15 /* zmq.h: the socket option of its ZMQ_POLLIN/ZMQ_POLLOUT state */
#define MAX_POLL_ITEMS 64
#define LONG_PREFIX 0xFF /* codec: a length of 255 or more follows as 4 big-endian bytes */
#define KEEP_MIN 65536   /* the links keep frames this large by reference (below it a copy costs less) */

/* what a dropped message broke, as router_recv reports it */
enum { TOO_MANY_FRAMES = 1, TOO_LARGE = 2 };
/* what server_recv reports instead of the frames of a part that does not unpack */
enum { DECODE_TOO_MANY = 1, DECODE_MALFORMED = 2 };

static int (*z_msg_init)(zmq_msg_t *);
static int (*z_msg_init_size)(zmq_msg_t *, size_t);
static int (*z_msg_init_data)(zmq_msg_t *, void *, size_t, void (*)(void *, void *), void *);
static int (*z_msg_move)(zmq_msg_t *, zmq_msg_t *);
static int (*z_msg_recv)(zmq_msg_t *, void *, int);
static int (*z_msg_send)(zmq_msg_t *, void *, int);
static int (*z_msg_close)(zmq_msg_t *);
static void *(*z_msg_data)(zmq_msg_t *);
static size_t (*z_msg_size)(const zmq_msg_t *);
static int (*z_msg_more)(const zmq_msg_t *);
static const char *(*z_msg_gets)(const zmq_msg_t *, const char *);
static uint32_t (*z_msg_routing_id)(zmq_msg_t *);
static int (*z_msg_set_routing_id)(zmq_msg_t *, uint32_t);
static int (*z_send)(void *, const void *, size_t, int);
static int (*z_poll)(zmq_pollitem_t *, int, long);
static int (*z_errno)(void);
static int (*z_getsockopt)(void *, int, void *, size_t *);
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
    {"zmq_msg_init_data", (void **)&z_msg_init_data, 1},
    {"zmq_msg_move", (void **)&z_msg_move, 1},
    {"zmq_msg_recv", (void **)&z_msg_recv, 1},
    {"zmq_msg_send", (void **)&z_msg_send, 1},
    {"zmq_msg_close", (void **)&z_msg_close, 1},
    {"zmq_msg_data", (void **)&z_msg_data, 1},
    {"zmq_msg_size", (void **)&z_msg_size, 1},
    {"zmq_msg_more", (void **)&z_msg_more, 1},
    {"zmq_msg_gets", (void **)&z_msg_gets, 1}, /* libzmq >= 4.1; pyzmq's Frame.get calls it too */
    {"zmq_msg_routing_id", (void **)&z_msg_routing_id, 0}, /* draft API: the SERVER functions need them */
    {"zmq_msg_set_routing_id", (void **)&z_msg_set_routing_id, 0},
    {"zmq_send", (void **)&z_send, 1},
    {"zmq_poll", (void **)&z_poll, 1},
    {"zmq_errno", (void **)&z_errno, 1},
    {"zmq_getsockopt", (void **)&z_getsockopt, 1},
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

/* ----------------------------------------------------------------------------- frames kept by reference */

/* A received message, kept while a frame of it is in use (by a KeptFrame or by a message being sent). */
typedef struct held {
    zmq_msg_t msg;
    long refs;         /* atomic */
    struct held *next; /* in the releaser's list */
} held_t;

static long held_now; /* atomic: received messages kept at this moment */

static void held_free(held_t *held) {
    z_msg_close(&held->msg);
    PyMem_RawFree(held);
    __atomic_sub_fetch(&held_now, 1, __ATOMIC_RELAXED);
}

/* Messages of RELEASE_AWAY bytes or more are freed by a thread of their own: the kernel unmaps each page of a
 * large buffer that another thread wrote, which costs the freeing thread milliseconds for 64 MiB, and neither
 * the broker's loop nor libzmq's I/O thread (whichever drops the last reference) should pay that. */
#define RELEASE_AWAY (1 << 20)
static pthread_mutex_t releases_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t releases_ready = PTHREAD_COND_INITIALIZER;
static held_t *releases;      /* waiting for the releaser, newest first */
static int releaser_running;  /* in this process (reset in a forked child) */

static void *releaser(void *unused) {
    pthread_mutex_lock(&releases_lock);
    for (;;) {
        while (releases == NULL)
            pthread_cond_wait(&releases_ready, &releases_lock);
        held_t *batch = releases;
        releases = NULL;
        pthread_mutex_unlock(&releases_lock);
        while (batch != NULL) {
            held_t *next = batch->next;
            held_free(batch);
            batch = next;
        }
        pthread_mutex_lock(&releases_lock);
    }
    return NULL;
}

static void releases_prepare(void) { pthread_mutex_lock(&releases_lock); }
static void releases_parent(void) { pthread_mutex_unlock(&releases_lock); }
static void releases_child(void) { /* the releaser is not in the child; what it had left is the parent's */
    pthread_mutex_init(&releases_lock, NULL);
    pthread_cond_init(&releases_ready, NULL);
    releases = NULL;
    releaser_running = 0;
}

/* Free `held` on the releaser thread if it is large (started on first use), else here. Any thread, no GIL. */
static void held_dispose(held_t *held) {
    if (z_msg_size(&held->msg) >= RELEASE_AWAY) {
        pthread_mutex_lock(&releases_lock);
        if (!releaser_running) {
            pthread_t thread;
            pthread_attr_t attributes;
            pthread_attr_init(&attributes);
            pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
            releaser_running = pthread_create(&thread, &attributes, releaser, NULL) == 0;
            pthread_attr_destroy(&attributes);
        }
        if (releaser_running) {
            held->next = releases;
            releases = held;
            pthread_cond_signal(&releases_ready);
            pthread_mutex_unlock(&releases_lock);
            return;
        }
        pthread_mutex_unlock(&releases_lock);
    }
    held_free(held);
}

static void held_acquire(held_t *held) { __atomic_add_fetch(&held->refs, 1, __ATOMIC_RELAXED); }

static void held_release(held_t *held) {
    if (__atomic_sub_fetch(&held->refs, 1, __ATOMIC_ACQ_REL) == 0)
        held_dispose(held);
}

/* libzmq's free function of a message sent by reference: any thread, no GIL. */
static void release_sent(void *data, void *hint) { held_release((held_t *)hint); }

/* The message in `msg` moved into a new held_t (refs 1; `msg` is left empty), or NULL with a Python error. */
static held_t *held_new(zmq_msg_t *msg) {
    held_t *held = PyMem_RawMalloc(sizeof *held);
    if (held == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    z_msg_init(&held->msg);
    z_msg_move(&held->msg, msg);
    held->refs = 1;
    __atomic_add_fetch(&held_now, 1, __ATOMIC_RELAXED);
    return held;
}

typedef struct {
    PyObject_HEAD held_t *held;
    char *data;
    Py_ssize_t size;
} kept_t;

static int kept_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    kept_t *kept = (kept_t *)self;
    return PyBuffer_FillInfo(view, self, kept->data, kept->size, 1, flags); /* read only */
}

static void kept_dealloc(PyObject *self) {
    held_release(((kept_t *)self)->held);
    PyObject_Free(self);
}

static PyBufferProcs kept_buffer = {kept_getbuffer, NULL};

static PyTypeObject KeptType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "generaldomo.io._speedups.KeptFrame",
    .tp_basicsize = sizeof(kept_t),
    .tp_dealloc = kept_dealloc,
    .tp_as_buffer = &kept_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A frame of a received message, kept by reference (links see it through a read-only memoryview).",
};

/* A read-only memoryview of `size` bytes at `data` inside `held`'s message, or NULL with a Python error. */
static PyObject *kept_frame(held_t *held, const unsigned char *data, Py_ssize_t size) {
    kept_t *kept = PyObject_New(kept_t, &KeptType);
    if (kept == NULL)
        return NULL;
    held_acquire(held);
    kept->held = held;
    kept->data = (char *)data;
    kept->size = size;
    PyObject *view = PyMemoryView_FromObject((PyObject *)kept);
    Py_DECREF(kept);
    return view;
}

/* Whether `item` is a (contiguous) memoryview of a KeptFrame: then *held and *view say where its bytes are. */
static int kept_of(PyObject *item, held_t **held, Py_buffer **view) {
    if (!PyMemoryView_Check(item))
        return 0;
    PyObject *base = PyMemoryView_GET_BASE(item);
    *view = PyMemoryView_GET_BUFFER(item);
    if (base == NULL || Py_TYPE(base) != &KeptType || !PyBuffer_IsContiguous(*view, 'C') || (*view)->len == 0)
        return 0;
    *held = ((kept_t *)base)->held;
    return 1;
}

/* The bytes the broker links read and wrote, by copy and by reference (read under the GIL). */
static unsigned long long copied_in, kept_in, copied_out, referenced_out;

/* ----------------------------------------------------------------------------- marked sends */

/* A message whose last part libzmq shares and reports letting go of (generaldomo.io.hub.backlog's marks, as pyzmq's
 * MessageTracker does): the part's free function sets `done`, from whichever thread libzmq calls it. */
typedef struct {
    long refs; /* atomic: the Tracker's and the part's */
    int done;  /* atomic */
} mark_t;

static void mark_release(mark_t *mark) {
    if (__atomic_sub_fetch(&mark->refs, 1, __ATOMIC_ACQ_REL) == 0)
        PyMem_RawFree(mark);
}

typedef struct {
    PyObject_HEAD mark_t *mark;
} tracker_t;

static PyObject *tracker_done(PyObject *self, void *closure) {
    return PyBool_FromLong(__atomic_load_n(&((tracker_t *)self)->mark->done, __ATOMIC_ACQUIRE));
}

static void tracker_dealloc(PyObject *self) {
    mark_release(((tracker_t *)self)->mark);
    PyObject_Free(self);
}

static PyGetSetDef tracker_getset[] = {
    {"done", tracker_done, NULL, "True once libzmq has let go of the message's last part.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TrackerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "generaldomo.io._speedups.Tracker",
    .tp_basicsize = sizeof(tracker_t),
    .tp_dealloc = tracker_dealloc,
    .tp_getset = tracker_getset,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Whether a marked message has left the process (done), as pyzmq's MessageTracker says it.",
};

static tracker_t *tracker_new(void) {
    mark_t *mark = PyMem_RawMalloc(sizeof *mark);
    tracker_t *tracker = mark == NULL ? NULL : PyObject_New(tracker_t, &TrackerType);
    if (tracker == NULL) {
        PyMem_RawFree(mark);
        PyErr_NoMemory();
        return NULL;
    }
    mark->refs = 1;
    mark->done = 0;
    tracker->mark = mark;
    return tracker;
}

/* What a marked part's free function releases: a kept message, or a buffer of the part's own. */
typedef struct {
    mark_t *mark;
    held_t *held;
    void *owned;
} marked_t;

static void release_marked(void *data, void *hint) {
    marked_t *marked = hint;
    if (marked->held != NULL)
        held_release(marked->held);
    PyMem_RawFree(marked->owned);
    __atomic_store_n(&marked->mark->done, 1, __ATOMIC_RELEASE);
    mark_release(marked->mark);
    PyMem_RawFree(marked);
}

/* Send `size` bytes at `data` as a message's last part (routing_id 0: none), marked by `mark`: the part points
 * at `held`'s message (whose reference is handed over) or at `owned` (a PyMem_RawMalloc buffer handed over).
 * 0 or an errno; whatever happens, what was handed over is released once libzmq is done. */
static int send_marked_part(void *socket, void *data, size_t size, held_t *held, void *owned, uint32_t routing_id,
                            mark_t *mark) {
    marked_t *marked = PyMem_RawMalloc(sizeof *marked);
    if (marked == NULL) {
        if (held != NULL)
            held_release(held);
        PyMem_RawFree(owned);
        return ENOMEM;
    }
    marked->mark = mark;
    marked->held = held;
    marked->owned = owned;
    __atomic_add_fetch(&mark->refs, 1, __ATOMIC_RELAXED);
    zmq_msg_t msg;
    if (z_msg_init_data(&msg, data, size, release_marked, marked) < 0) {
        int code = z_errno();
        release_marked(data, marked);
        return code;
    }
    if ((routing_id != 0 && z_msg_set_routing_id(&msg, routing_id) < 0) || z_msg_send(&msg, socket, ZMQ_DONTWAIT) < 0) {
        int code = z_errno();
        z_msg_close(&msg); /* releases what was handed over */
        return code;
    }
    return 0;
}

PyDoc_STRVAR(traffic_doc, "traffic() -> dict: the bytes of frames the broker links (ROUTER sockets and SERVER sockets "
                          "with routing ids) read and sent in this process, copied and by reference, and how many "
                          "received messages are kept at this moment (held).");

static PyObject *sp_traffic(PyObject *self, PyObject *unused) {
    return Py_BuildValue("{sKsKsKsKsl}", "received_copied", copied_in, "received_kept", kept_in, "sent_copied",
                         copied_out, "sent_by_reference", referenced_out, "held",
                         __atomic_load_n(&held_now, __ATOMIC_RELAXED));
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

/* Read and discard the rest of the message being read (`more`: whether the last frame read had more after it),
 * into `msg`; return the frames read. */
static Py_ssize_t discard_rest(void *socket, zmq_msg_t *msg, int more) {
    Py_ssize_t count = 0;
    while (more) {
        if (z_msg_recv(msg, socket, ZMQ_DONTWAIT) < 0)
            break;
        count++;
        more = z_msg_more(msg);
    }
    return count;
}

typedef struct {
    Py_ssize_t max_frames, max_bytes; /* after a ROUTER message's identity; SERVER: packed frames */
    Py_ssize_t keep_min;              /* frames of this many bytes or more are kept by reference; 0: none */
    int user_ids;                     /* report each message's User-Id (a CURVE link's read) */
} limits_t;

/* The User-Id metadata of `msg` (CURVE: the ZAP handler's user id, the key's Z85 text) as a str, or None when it
 * has none: what pyzmq's Frame.get("User-Id") gives (undecodable bytes replaced: such an id names no key). Read
 * before the message may move (read_frame, decode_frames); NULL with a Python error. */
static PyObject *user_id_of(const zmq_msg_t *msg) {
    const char *user = z_msg_gets(msg, "User-Id");
    if (user == NULL)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(user, (Py_ssize_t)strlen(user), "replace");
}

/* A frame of a message being read: kept by reference (the message moved out of `msg`) when limits allow, else a
 * copy; NULL with a Python error. */
static PyObject *read_frame(zmq_msg_t *msg, Py_ssize_t length, const limits_t *limits) {
    if (limits->keep_min <= 0 || length < limits->keep_min) {
        if (limits->keep_min > 0)
            copied_in += (unsigned long long)length;
        return PyBytes_FromStringAndSize(z_msg_data(msg), length);
    }
    held_t *held = held_new(msg);
    if (held == NULL)
        return NULL;
    PyObject *frame = kept_frame(held, z_msg_data(&held->msg), length);
    held_release(held);
    kept_in += (unsigned long long)length;
    return frame;
}

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
    PyObject *frames = PyList_New(0), *user = NULL;
    PyObject *identity = PyBytes_FromStringAndSize(z_msg_data(msg), (Py_ssize_t)z_msg_size(msg));
    if (frames == NULL || identity == NULL || PyList_Append(frames, identity) < 0)
        goto failed;
    Py_ssize_t room = max_bytes, left = max_frames;
    int more = z_msg_more(msg);
    while (more) {
        if (z_msg_recv(msg, socket, ZMQ_DONTWAIT) < 0) { /* libzmq delivers a message whole: not expected */
            *code = z_errno();
            goto failed;
        }
        more = z_msg_more(msg); /* before read_frame, which may move the frame out of msg */
        /* libzmq attaches the metadata to the frames the peer sent, not to the identity frame */
        if (limits->user_ids && user == NULL && (user = user_id_of(msg)) == NULL) {
            discard_rest(socket, msg, more);
            goto failed;
        }
        Py_ssize_t length = (Py_ssize_t)z_msg_size(msg);
        int kind = left <= 0 ? TOO_MANY_FRAMES : (length > room ? TOO_LARGE : 0);
        if (kind) {
            Py_ssize_t read = max_frames - left + 1 + discard_rest(socket, msg, more);
            Py_DECREF(frames);
            frames = user == NULL ? Py_BuildValue("(inO)", kind, read, identity)
                                  : Py_BuildValue("(inON)", kind, read, identity, user);
            Py_DECREF(identity);
            return frames;
        }
        PyObject *frame = read_frame(msg, length, limits);
        if (frame == NULL || PyList_Append(frames, frame) < 0) {
            Py_XDECREF(frame);
            discard_rest(socket, msg, more);
            goto failed;
        }
        Py_DECREF(frame);
        room -= length;
        left--;
        *size += length;
    }
    Py_DECREF(identity);
    if (limits->user_ids) { /* the User-Id last (None: no frame after the identity) */
        if (user == NULL) {
            user = Py_None;
            Py_INCREF(user);
        }
        int appended = PyList_Append(frames, user);
        Py_DECREF(user);
        if (appended < 0)
            Py_CLEAR(frames);
    }
    return frames;
failed:
    Py_XDECREF(frames);
    Py_XDECREF(identity);
    Py_XDECREF(user);
    return NULL;
}

PyDoc_STRVAR(router_recv_doc,
             "router_recv(handle, max_messages, max_frames, max_bytes, batch_bytes, keep_min=0, user_ids=False) -> "
             "list: the messages waiting on "
             "a ROUTER socket, without blocking: each a list [identity, frame, ...], or a tuple (kind, frames, "
             "identity) for one dropped for more than max_frames frames (kind 1) or max_bytes bytes (kind 2) after "
             "the identity. Stops after max_messages, or once batch_bytes bytes were read. With keep_min (a broker "
             "link's read), frames of keep_min bytes or more are read-only memoryviews kept by reference. With "
             "user_ids (a CURVE link's read), each list ends with, and each tuple has a fourth item, the message's "
             "User-Id (read from its first frame after the identity): a str, or None (none, or no such frame).");

static PyObject *sp_router_recv(PyObject *self, PyObject *args) {
    PyObject *handle;
    Py_ssize_t max_messages, batch_bytes;
    limits_t limits = {0, 0, 0, 0};
    if (!PyArg_ParseTuple(args, "Onnnn|np", &handle, &max_messages, &limits.max_frames, &limits.max_bytes,
                          &batch_bytes, &limits.keep_min, &limits.user_ids) ||
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

/* Send `item` as the marked last part of a message: a kept frame by reference, anything else copied into a
 * buffer of its own. 0 or an errno; *failed on a Python error. */
static int send_marked_frame(void *socket, PyObject *item, int counted, mark_t *mark, int *failed) {
    held_t *held;
    Py_buffer *kept;
    if (kept_of(item, &held, &kept)) {
        held_acquire(held);
        int code = send_marked_part(socket, kept->buf, (size_t)kept->len, held, NULL, 0, mark);
        referenced_out += counted && !code ? (unsigned long long)kept->len : 0;
        return code;
    }
    Py_buffer view;
    if (frame_view(item, &view) < 0) {
        *failed = 1;
        return 0;
    }
    Py_ssize_t size = view.len;
    void *copy = PyMem_RawMalloc(size > 0 ? (size_t)size : 1);
    if (copy != NULL)
        memcpy(copy, view.buf, (size_t)size);
    frame_release(&view);
    if (copy == NULL) {
        PyErr_NoMemory();
        *failed = 1;
        return 0;
    }
    int code = send_marked_part(socket, copy, (size_t)size, NULL, copy, 0, mark);
    copied_out += counted && !code ? (unsigned long long)size : 0;
    return code;
}

/* Send one frame: a kept frame (or a slice of one) by reference, anything else copied by libzmq. 0 or an errno;
 * *failed on a Python error. `counted`: a broker link's send (see traffic()). */
static int send_frame(void *socket, PyObject *item, int flags, int counted, int *failed) {
    held_t *held;
    Py_buffer *kept;
    if (kept_of(item, &held, &kept)) {
        zmq_msg_t msg;
        held_acquire(held); /* released by libzmq through release_sent once the message is gone */
        if (z_msg_init_data(&msg, kept->buf, (size_t)kept->len, release_sent, held) < 0) {
            held_release(held);
            return z_errno();
        }
        if (z_msg_send(&msg, socket, flags) < 0) {
            int code = z_errno();
            z_msg_close(&msg); /* libzmq keeps ownership only of a message it sent: this releases held */
            return code;
        }
        referenced_out += counted ? (unsigned long long)kept->len : 0;
        return 0;
    }
    Py_buffer view;
    if (frame_view(item, &view) < 0) {
        *failed = 1;
        return 0;
    }
    int rc = z_send(socket, view.buf, (size_t)view.len, flags);
    copied_out += counted && rc >= 0 ? (unsigned long long)view.len : 0;
    frame_release(&view);
    return rc < 0 ? z_errno() : 0;
}

/* Send every item of the sequence `frames` (a list or tuple), the last one with `last_flags`, or marked by `mark`
 * if it is not NULL. 0 or an errno. */
static int send_frames(void *socket, PyObject *frames, int last_flags, int counted, mark_t *mark, int *failed) {
    Py_ssize_t count = PySequence_Fast_GET_SIZE(frames);
    PyObject **items = PySequence_Fast_ITEMS(frames);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i == count - 1 && mark != NULL)
            return send_marked_frame(socket, items[i], counted, mark, failed);
        int code = send_frame(socket, items[i], i == count - 1 ? last_flags : ZMQ_SNDMORE | ZMQ_DONTWAIT, counted,
                              failed);
        if (code || *failed)
            return code;
    }
    return 0;
}

PyDoc_STRVAR(router_send_doc,
             "router_send(handle, route, frames) -> int: send the route's frames (a bytes identity, or a tuple of "
             "them) then frames, without blocking; 0, or the errno that refused the first frame (EAGAIN: the peer's "
             "queue is full; EHOSTUNREACH: it is gone). frames must not be empty.");

/* router_send's work, the last frame marked by `mark` if it is not NULL: 0, an errno, or -1 with a Python error. */
static int router_send(PyObject *args, mark_t *mark) {
    PyObject *handle, *route, *frames;
    if (!PyArg_ParseTuple(args, "OOO", &handle, &route, &frames) || !require_bound())
        return -1;
    void *socket = socket_handle(handle);
    PyObject *sequence = socket == NULL ? NULL : message_frames(frames, "frame");
    if (sequence == NULL)
        return -1;
    int failed = 0, code;
    if (PyBytes_CheckExact(route)) {
        code = z_send(socket, PyBytes_AS_STRING(route), (size_t)PyBytes_GET_SIZE(route), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        code = code < 0 ? z_errno() : 0;
    } else {
        PyObject *hops = message_frames(route, "hop");
        if (hops == NULL) {
            Py_DECREF(sequence);
            return -1;
        }
        code = send_frames(socket, hops, ZMQ_SNDMORE | ZMQ_DONTWAIT, 0, NULL, &failed);
        Py_DECREF(hops);
    }
    if (code == 0 && !failed) /* past the first frame the message is the peer's: libzmq takes the rest */
        code = send_frames(socket, sequence, ZMQ_DONTWAIT, 1, mark, &failed);
    Py_DECREF(sequence);
    return failed ? -1 : code;
}

static PyObject *sp_router_send(PyObject *self, PyObject *args) {
    int code = router_send(args, NULL);
    return code < 0 ? NULL : PyLong_FromLong(code);
}

/* A tracker once the marked message went, else the errno that refused it (an int), or NULL with a Python error. */
static PyObject *tracked(tracker_t *tracker, int code) {
    if (code == 0)
        return (PyObject *)tracker;
    Py_DECREF(tracker);
    return code < 0 ? NULL : PyLong_FromLong(code);
}

PyDoc_STRVAR(router_send_marked_doc,
             "router_send_marked(handle, route, frames) -> Tracker | int: router_send with the last frame marked "
             "(generaldomo.io.hub.backlog): a Tracker whose done says when libzmq has let go of it, or the errno that "
             "refused the message.");

static PyObject *sp_router_send_marked(PyObject *self, PyObject *args) {
    tracker_t *tracker = tracker_new();
    return tracker == NULL ? NULL : tracked(tracker, router_send(args, tracker->mark));
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
    int code = send_frames(socket, sequence, ZMQ_DONTWAIT, 0, NULL, &failed);
    Py_DECREF(sequence);
    return failed ? NULL : PyLong_FromLong(code);
}

PyDoc_STRVAR(readable_doc, "readable(handle) -> bool: whether a message waits on the socket (ZMQ_EVENTS has "
                           "ZMQ_POLLIN): pyzmq's getsockopt(EVENTS) builds an enum member per call.");

static PyObject *sp_readable(PyObject *self, PyObject *handle) {
    if (!require_bound())
        return NULL;
    void *socket = socket_handle(handle);
    if (socket == NULL)
        return NULL;
    int events = 0;
    size_t size = sizeof events;
    if (z_getsockopt(socket, ZMQ_EVENTS, &events, &size) < 0)
        return zmq_error(z_errno());
    return PyBool_FromLong(events & ZMQ_POLLIN);
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

PyDoc_STRVAR(encode_doc, "encode(frames) -> bytes: generaldomo.sansio.wire.codec.encode in C.");

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
 * max_frames frames, max_frames < 0 meaning no limit; DECODE_MALFORMED, at *where) or with a Python error.
 * `data` is `msg`'s when msg is not NULL: then frames of keep_min bytes or more (keep_min > 0) are kept by
 * reference, and the message moves out of msg into the frames' holder. */
static PyObject *decode_frames(const unsigned char *data, Py_ssize_t length, Py_ssize_t max_frames, int *problem,
                               Py_ssize_t *where, zmq_msg_t *msg, Py_ssize_t keep_min) {
    held_t *held = NULL;
    int counted = msg != NULL && keep_min > 0;
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
        PyObject *frame;
        if (counted && size >= keep_min) {
            if (held == NULL && (held = held_new(msg)) != NULL)
                data = z_msg_data(&held->msg); /* the same bytes: a message this large is not stored inline */
            frame = held == NULL ? NULL : kept_frame(held, data + pos, size);
            kept_in += (unsigned long long)size;
        } else {
            frame = PyBytes_FromStringAndSize((const char *)data + pos, size);
            copied_in += counted ? (unsigned long long)size : 0;
        }
        if (frame == NULL || PyList_Append(frames, frame) < 0)
            Py_CLEAR(frames);
        Py_XDECREF(frame);
        pos += size;
    }
    if (*problem)
        Py_CLEAR(frames);
    if (held != NULL)
        held_release(held); /* the frames hold it now, if any is left */
    return frames;
}

PyDoc_STRVAR(decode_doc, "decode(data, max_frames, too_many, malformed) -> list: "
                         "generaldomo.sansio.wire.codec.decode in C (max_frames -1: no limit), raising too_many or "
                         "malformed, the codec's error classes.");

static PyObject *sp_decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t max_frames;
    PyObject *too_many, *malformed;
    if (!PyArg_ParseTuple(args, "y*nOO", &view, &max_frames, &too_many, &malformed))
        return NULL;
    int problem = 0;
    Py_ssize_t where = 0;
    PyObject *frames = decode_frames(view.buf, view.len, max_frames, &problem, &where, NULL, 0);
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
             "server_recv(handle, max_messages, max_frames, batch_bytes, keep_min=0, user_ids=False) -> list: the "
             "messages waiting on a SERVER "
             "socket, without blocking, each (routing_id, frames) unpacked by the codec, or (routing_id, problem) "
             "when the part does not unpack (1: more than max_frames frames, 2: malformed). Stops after "
             "max_messages, or once batch_bytes bytes were read. With keep_min (a broker link's read), frames of "
             "keep_min bytes or more are read-only memoryviews kept by reference. With user_ids (a CURVE link's "
             "read), each tuple has a third item, the part's User-Id: a str, or None.");

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
    unsigned long routing_id = (unsigned long)z_msg_routing_id(msg); /* before decode_frames may move msg */
    PyObject *user = limits->user_ids ? user_id_of(msg) : NULL;
    if (limits->user_ids && user == NULL)
        return NULL;
    PyObject *frames = decode_frames(z_msg_data(msg), length, limits->max_frames, &problem, &where, msg,
                                     limits->keep_min);
    if (user != NULL) {
        if (frames != NULL)
            return Py_BuildValue("(kNN)", routing_id, frames, user);
        if (problem)
            return Py_BuildValue("(kiN)", routing_id, problem, user);
        Py_DECREF(user);
        return NULL;
    }
    if (frames != NULL)
        return Py_BuildValue("(kN)", routing_id, frames);
    return problem ? Py_BuildValue("(ki)", routing_id, problem) : NULL;
}

static PyObject *sp_server_recv(PyObject *self, PyObject *args) {
    PyObject *handle;
    Py_ssize_t max_messages, batch_bytes;
    limits_t limits = {0, 0, 0, 0};
    if (!PyArg_ParseTuple(args, "Onnn|np", &handle, &max_messages, &limits.max_frames, &batch_bytes,
                          &limits.keep_min, &limits.user_ids) ||
        !require_bound() || !require_draft())
        return NULL;
    return read_batch(handle, max_messages, batch_bytes, read_server_message, &limits);
}

PyDoc_STRVAR(server_send_doc, "server_send(handle, routing_id, frames) -> int: pack frames with the codec into one "
                              "part and send it to routing_id (0: none, from a CLIENT socket) without blocking; 0 or "
                              "the errno that refused it.");

/* What server_send and server_send_marked are given: the socket, routing id, frames (a new fast sequence) and
 * their packed size; NULL with a Python error. */
static PyObject *server_message(PyObject *args, void **socket, unsigned long *routing_id, Py_ssize_t *size) {
    PyObject *handle, *frames;
    if (!PyArg_ParseTuple(args, "OkO", &handle, routing_id, &frames) || !require_bound() || !require_draft())
        return NULL;
    *socket = socket_handle(handle);
    PyObject *sequence = *socket == NULL ? NULL : PySequence_Fast(frames, "frames must be a sequence");
    if (sequence != NULL && (*size = encoded_size(sequence)) < 0)
        Py_CLEAR(sequence);
    return sequence;
}

static PyObject *sp_server_send(PyObject *self, PyObject *args) {
    void *socket;
    unsigned long routing_id;
    Py_ssize_t size;
    PyObject *sequence = server_message(args, &socket, &routing_id, &size);
    if (sequence == NULL)
        return NULL;
    zmq_msg_t msg;
    if (z_msg_init_size(&msg, (size_t)size) < 0) {
        Py_DECREF(sequence);
        return PyErr_NoMemory();
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
    } else if (routing_id != 0) {
        copied_out += (unsigned long long)size; /* a SERVER part is one buffer: its frames are copied into it */
    }
    return PyLong_FromLong(code);
}

PyDoc_STRVAR(server_send_marked_doc,
             "server_send_marked(handle, routing_id, frames) -> Tracker | int: server_send with the part marked "
             "(generaldomo.io.hub.backlog): a Tracker whose done says when libzmq has let go of it, or the errno that "
             "refused it.");

static PyObject *sp_server_send_marked(PyObject *self, PyObject *args) {
    void *socket;
    unsigned long routing_id;
    Py_ssize_t size;
    PyObject *sequence = server_message(args, &socket, &routing_id, &size);
    if (sequence == NULL)
        return NULL;
    void *packed = PyMem_RawMalloc(size > 0 ? (size_t)size : 1);
    if (packed == NULL || encode_into(sequence, packed) < 0) {
        Py_DECREF(sequence);
        PyMem_RawFree(packed);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    Py_DECREF(sequence);
    tracker_t *tracker = tracker_new();
    if (tracker == NULL) {
        PyMem_RawFree(packed);
        return NULL;
    }
    int code = send_marked_part(socket, packed, (size_t)size, NULL, packed, (uint32_t)routing_id, tracker->mark);
    copied_out += routing_id != 0 && !code ? (unsigned long long)size : 0;
    return tracked(tracker, code);
}

static PyMethodDef methods[] = {
    {"bind", sp_bind, METH_VARARGS, bind_doc},
    {"traffic", sp_traffic, METH_NOARGS, traffic_doc},
    {"poll", sp_poll, METH_VARARGS, poll_doc},
    {"router_recv", sp_router_recv, METH_VARARGS, router_recv_doc},
    {"router_send", sp_router_send, METH_VARARGS, router_send_doc},
    {"send_multipart", sp_send_multipart, METH_VARARGS, send_multipart_doc},
    {"readable", sp_readable, METH_O, readable_doc},
    {"server_recv", sp_server_recv, METH_VARARGS, server_recv_doc},
    {"server_send", sp_server_send, METH_VARARGS, server_send_doc},
    {"router_send_marked", sp_router_send_marked, METH_VARARGS, router_send_marked_doc},
    {"server_send_marked", sp_server_send_marked, METH_VARARGS, server_send_marked_doc},
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

PyMODINIT_FUNC PyInit__speedups(void) {
    if (PyType_Ready(&KeptType) < 0 || PyType_Ready(&TrackerType) < 0)
        return NULL;
    if (pthread_atfork(releases_prepare, releases_parent, releases_child) != 0)
        return PyErr_Format(PyExc_OSError, "pthread_atfork failed");
    PyObject *created = PyModule_Create(&module);
    if (created != NULL && PyModule_AddIntConstant(created, "KEEP_MIN", KEEP_MIN) < 0)
        Py_CLEAR(created);
    return created;
}
