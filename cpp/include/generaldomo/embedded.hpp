// generaldomo/embedded.hpp: generaldomo::EmbeddedBroker, the project's Python broker run inside a C++ program, in
// a thread of its own, on the program's libzmq context: Client and Worker objects of that context reach it over
// inproc:// (no socket hop; libzmq moves messages, and the broker forwards large frames by reference), while it
// also binds tcp:// (or ipc://) for peers elsewhere. Optional: include it only in a program that links libpython
// and pyzmq's libzmq (see README.rst, "One program"). Include it before any standard header (Python.h's rule).
//
// Rules: the settings are the `generaldomo broker` command's flags as key/value pairs or a file of them, read by
// that command's own parser (generaldomo/cli/embedded.py): nothing here restates them. Only the broker's thread
// runs Python while it serves (it releases the GIL whenever it waits); the constructor, stop() and the destructor
// take the GIL for a moment, other calls never. There is one libzmq in the process, pyzmq's: a context cannot be
// shared between two copies, so the broker refuses to start when the program's zmq_ctx_new is not pyzmq's.
// An interpreter the program has already initialised is used as it is; otherwise the first EmbeddedBroker
// initialises one (no signal handlers; the environment of EmbeddedOptions::python or $GENERALDOMO_PYTHON) and
// leaves it for the life of the process.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef ZMQ_BUILD_DRAFT_API
#define ZMQ_BUILD_DRAFT_API
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <zmq.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace generaldomo {

// The embedded broker could not start, or its thread stopped with an error: the Python exception's type and
// message, and its traceback.
class BrokerError : public std::runtime_error {
public:
    explicit BrokerError(const std::string &what, std::string traceback = {})
        : std::runtime_error(what), traceback_(std::move(traceback))
    {
    }
    const std::string &traceback() const { return traceback_; }

private:
    std::string traceback_;
};

using Settings = std::vector<std::pair<std::string, std::string>>;  // (flag without dashes, value), in order

struct EmbeddedOptions {
    Settings settings;          // e.g. {{"server", "inproc://tasks"}, {"router", "tcp://127.0.0.1:*"}}
    std::string config_file;    // a file of "key = value" lines, read before `settings`
    void *context = nullptr;    // the program's libzmq context; by default the broker makes one (context())
    std::string python;         // if this call initialises Python: a python executable whose environment to use
    std::chrono::milliseconds drain{10000};  // stop(): how long to serve held requests before failing them
};

namespace detail {

// Holds the GIL for its lifetime (any thread).
class Gil {
public:
    Gil() : state_(PyGILState_Ensure()) {}
    Gil(const Gil &) = delete;
    Gil &operator=(const Gil &) = delete;
    ~Gil() { PyGILState_Release(state_); }

private:
    PyGILState_STATE state_;
};

// Runs f with the GIL released if the calling thread holds it (an application that runs Python itself).
template <class F>
void without_gil(F &&f)
{
    if (Py_IsInitialized() && PyGILState_Check()) {
        PyThreadState *saved = PyEval_SaveThread();
        try {
            f();
        } catch (...) {
            PyEval_RestoreThread(saved);
            throw;
        }
        PyEval_RestoreThread(saved);
    } else {
        f();
    }
}

// An owned reference (the GIL must be held to make, copy or drop one).
class Ref {
public:
    explicit Ref(PyObject *object = nullptr) : object_(object) {}
    Ref(Ref &&other) noexcept : object_(std::exchange(other.object_, nullptr)) {}
    Ref &operator=(Ref &&other) noexcept
    {
        std::swap(object_, other.object_);
        return *this;
    }
    Ref(const Ref &) = delete;
    Ref &operator=(const Ref &) = delete;
    ~Ref() { Py_XDECREF(object_); }
    PyObject *get() const { return object_; }
    PyObject *release() { return std::exchange(object_, nullptr); }
    explicit operator bool() const { return object_ != nullptr; }

private:
    PyObject *object_;
};

inline std::string text_of(PyObject *object)
{
    Ref text(object ? PyObject_Str(object) : nullptr);
    const char *utf8 = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
    if (!utf8)
        PyErr_Clear();
    return utf8 ? utf8 : "?";
}

// The pending Python exception as a BrokerError (cleared); `what` says what was being done.
inline BrokerError python_error(const std::string &what)
{
    PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
    PyErr_Fetch(&type, &value, &trace);
    PyErr_NormalizeException(&type, &value, &trace);
    Ref owned_type(type), owned_value(value), owned_trace(trace);
    if (!type)
        return BrokerError(what + ": unknown error");
    std::string message = what + ": " + reinterpret_cast<PyTypeObject *>(type)->tp_name + ": " + text_of(value);
    std::string traceback;
    Ref module(PyImport_ImportModule("traceback"));
    Ref lines(module ? PyObject_CallMethod(module.get(), "format_exception", "OOO", type, value ? value : Py_None,
                                           trace ? trace : Py_None)
                     : nullptr);
    Ref empty(PyUnicode_FromString(""));
    Ref joined(lines && empty ? PyUnicode_Join(empty.get(), lines.get()) : nullptr);
    if (joined)
        traceback = text_of(joined.get());
    PyErr_Clear();
    return BrokerError(message, traceback);
}

inline Ref checked(PyObject *object, const std::string &what)
{
    if (!object)
        throw python_error(what);
    return Ref(object);
}

// Initialises Python unless it already runs, and releases the GIL the initialising thread gets. Never finalised.
inline void ensure_python(const std::string &python)
{
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    if (Py_IsInitialized())
        return;
    const char *variable = std::getenv("GENERALDOMO_PYTHON");
    const std::string executable = !python.empty() ? python : variable ? variable : "";
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;  // the program's signals stay the program's
    config.parse_argv = 0;
    PyStatus status = PyStatus_Ok();
    if (!executable.empty())  // Python finds that environment (a venv's pyvenv.cfg included) from it
        status = PyConfig_SetBytesString(&config, &config.executable, executable.c_str());
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status))
        throw BrokerError(std::string("cannot start Python: ") + (status.err_msg ? status.err_msg : "unknown error"));
    PyEval_SaveThread();  // from now on a thread takes the GIL when it runs Python
}

// What to say when generaldomo cannot be imported (GIL held): the Python in use, and the variable that chooses it.
inline std::string not_importable()
{
    PyObject *executable = PySys_GetObject("executable");  // borrowed
    std::string python = executable && PyUnicode_Check(executable) ? text_of(executable) : "";
    if (python.empty())
        python = "Python's default";
    const char *variable = std::getenv("GENERALDOMO_PYTHON");
    const std::string chosen = variable && *variable ? "GENERALDOMO_PYTHON=" + std::string(variable) + " chose it"
                                                     : "GENERALDOMO_PYTHON is not set";
    return "cannot import generaldomo in the Python this program runs (" + python + "; " + chosen +
           "): set GENERALDOMO_PYTHON to the python of the environment where generaldomo is installed, e.g. "
           "GENERALDOMO_PYTHON=$(command -v python) before the program (or EmbeddedOptions::python)";
}

// BrokerError unless the zmq_ctx_new this program calls is the one in pyzmq's extension module (GIL held).
inline void require_one_libzmq()
{
    Ref extension = checked(PyImport_ImportModule("zmq.backend.cython._zmq"), "cannot import pyzmq");
    Ref file = checked(PyObject_GetAttrString(extension.get(), "__file__"), "pyzmq's extension has no file");
    const std::string path = text_of(file.get());
    void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    void *theirs = library ? dlsym(library, "zmq_ctx_new") : nullptr;
    if (library)
        dlclose(library);
    if (theirs != reinterpret_cast<void *>(&zmq_ctx_new))
        throw BrokerError("this program and pyzmq use two copies of libzmq, which cannot share a context: link the "
                          "program against pyzmq's extension " + path +
                          " (python -m generaldomo.cli.embedded --libs), not against another libzmq");
}

}  // namespace detail

class EmbeddedBroker {
public:
    // Starts the broker: returns once it is bound to its endpoints, or throws BrokerError.
    explicit EmbeddedBroker(EmbeddedOptions options = {})
        : options_(std::move(options)), context_(options_.context ? options_.context : zmq_ctx_new()),
          owned_context_(options_.context == nullptr)
    {
        if (!context_)
            throw BrokerError("zmq_ctx_new failed");
        std::promise<void> started;
        std::future<void> ready = started.get_future();
        try {
            detail::ensure_python(options_.python);
            thread_ = std::thread([this, started = std::move(started)]() mutable { serve(std::move(started)); });
            detail::without_gil([&] { ready.get(); });
        } catch (...) {
            if (thread_.joinable())
                detail::without_gil([&] { thread_.join(); });
            if (owned_context_)
                zmq_ctx_term(context_);
            throw;
        }
    }

    EmbeddedBroker(const EmbeddedBroker &) = delete;
    EmbeddedBroker &operator=(const EmbeddedBroker &) = delete;

    // Stops the broker (as stop() does) if it still runs; errors are not reported here, call stop() for them.
    ~EmbeddedBroker()
    {
        try {
            stop();
        } catch (...) {
        }
        {
            detail::Gil gil;
            Py_XDECREF(broker_);
        }
        if (owned_context_)
            zmq_ctx_term(context_);  // waits for the program's sockets on it: close its Clients and Workers first
    }

    // The libzmq context the broker's sockets use: give it to Client and Worker objects that use inproc://.
    void *context() const { return context_; }

    // Every bound endpoint as (transport, endpoint), with the ports that "*" binds received.
    const std::vector<std::pair<std::string, std::string>> &endpoints() const
    {
        check();
        return endpoints_;
    }

    // The first bound endpoint of the transport ("router" or "server") starting with scheme ("tcp", "inproc").
    std::string endpoint(std::string_view transport, std::string_view scheme = "") const
    {
        for (const auto &[kind, endpoint] : endpoints())
            if (kind == transport && endpoint.compare(0, scheme.size(), scheme) == 0)
                return endpoint;
        throw std::out_of_range("no " + std::string(transport) + " link bound to a " +
                                std::string(scheme.empty() ? "any" : scheme) + " endpoint");
    }

    // Throws BrokerError if the broker's thread stopped with an error.
    void check() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (error_)
            std::rethrow_exception(error_);
    }

    // True while the broker serves (false once stopped, or failed).
    bool running() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return !finished_;
    }

    // The CPU time the broker's thread has used.
    std::chrono::nanoseconds cpu_time() const
    {
        clockid_t clock;
        timespec spent{};
        std::lock_guard<std::mutex> lock(mutex_);
        if (finished_ || pthread_getcpuclockid(native_, &clock) != 0 || clock_gettime(clock, &spent) != 0)
            return std::chrono::nanoseconds(0);
        return std::chrono::seconds(spent.tv_sec) + std::chrono::nanoseconds(spent.tv_nsec);
    }

    // Stop serving: new requests get 503 while the requests the broker holds are served for up to `drain`; those
    // still unanswered then get 503, so that none is lost. Returns once the broker's thread has ended; throws
    // BrokerError if it had failed. Idempotent.
    void stop(std::chrono::milliseconds drain)
    {
        std::lock_guard<std::mutex> stopping(stop_mutex_);
        if (thread_.joinable()) {
            {
                detail::Gil gil;
                detail::Ref done(PyObject_CallMethod(broker_, "stop", "d", drain.count() / 1000.0));
                if (!done)
                    record(detail::python_error("the broker's stop failed"));
            }
            detail::without_gil([&] { thread_.join(); });
        }
        check();
    }
    void stop() { stop(options_.drain); }

private:
    // The broker's thread: build the broker (binding its endpoints), report, serve until stop().
    void serve(std::promise<void> started)
    {
        detail::Gil gil;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            native_ = pthread_self();
        }
        try {
            detail::Ref module = detail::checked(PyImport_ImportModule("generaldomo.cli.embedded"),
                                                 detail::not_importable());
            detail::require_one_libzmq();
            detail::Ref settings = detail::checked(PyList_New(0), "settings");
            for (const auto &[key, value] : options_.settings) {
                detail::Ref pair = detail::checked(Py_BuildValue("(ss)", key.c_str(), value.c_str()), "settings");
                if (PyList_Append(settings.get(), pair.get()) != 0)
                    throw detail::python_error("settings");
            }
            detail::Ref config = options_.config_file.empty()
                                     ? detail::Ref((Py_INCREF(Py_None), Py_None))
                                     : detail::checked(PyUnicode_FromString(options_.config_file.c_str()), "config");
            detail::Ref broker = detail::checked(
                PyObject_CallMethod(module.get(), "EmbeddedBroker", "KOO",
                                    static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(context_)),
                                    settings.get(), config.get()),
                "the broker did not start");
            detail::Ref bound = detail::checked(PyObject_GetAttrString(broker.get(), "endpoints"), "endpoints");
            detail::Ref items = detail::checked(PySequence_Fast(bound.get(), "endpoints"), "endpoints");
            for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items.get()); ++i) {
                PyObject *item = PySequence_Fast_GET_ITEM(items.get(), i);
                endpoints_.emplace_back(detail::text_of(PyTuple_GetItem(item, 0)),
                                        detail::text_of(PyTuple_GetItem(item, 1)));
            }
            broker_ = broker.release();
        } catch (...) {
            {
                std::lock_guard<std::mutex> lock(mutex_);
                finished_ = true;
            }
            started.set_exception(std::current_exception());
            return;
        }
        started.set_value();
        detail::Ref served(PyObject_CallMethod(broker_, "run", nullptr));  // the GIL is released while it waits
        if (!served)
            record(detail::python_error("the broker stopped with an error"));
        std::lock_guard<std::mutex> lock(mutex_);
        finished_ = true;
    }

    void record(const BrokerError &error)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_)
            error_ = std::make_exception_ptr(error);
    }

    EmbeddedOptions options_;
    void *context_;
    bool owned_context_;
    PyObject *broker_ = nullptr;  // the Python EmbeddedBroker, once started
    std::vector<std::pair<std::string, std::string>> endpoints_;
    mutable std::mutex mutex_;  // guards error_, finished_ and native_'s use
    std::exception_ptr error_;
    bool finished_ = false;
    pthread_t native_{};
    std::mutex stop_mutex_;  // serialises stop() callers
    std::thread thread_;     // last: started once everything above exists
};

}  // namespace generaldomo
