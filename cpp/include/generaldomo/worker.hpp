// generaldomo/worker.hpp: generaldomo::Worker, a GDP worker over the SERVER transport that serves one service
// description with a handler. It owns the worker's side of the conversation: READY (carrying the previous
// result), heartbeats both ways (also while the handler runs), reconnecting when the broker falls silent or
// says DISCONNECT, and DISCONNECT when it stops. The IO thread owns the socket; the handler runs on a
// thread of its own, one task at a time. Its READY says it understands request fields and CANCEL (peer info),
// so a task carries the client's deadline and a handler can see that its task was cancelled (or expired);
// a broker older than peer info refuses that READY, and the worker then registers with a plain one.
//
// Hand-over (a broker with a state directory, whose heartbeats name its instance): each result is held from
// when it goes out until a heartbeat names its task as taken; registering again, or hearing a new instance,
// sends the held results again (HANDOVER); a DISCONNECT while a task runs (a restarted broker that does not
// know this worker) makes it register again at once with RESUME, so that the new broker neither runs the task
// elsewhere nor loses its result. The rules are Python's WorkerSession's (generaldomo/sansio/peer/session.py).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <unistd.h>

#include "generaldomo/connection.hpp"
#include "generaldomo/protocol.hpp"

namespace generaldomo {

// One task as the handler sees it.
class Task {
public:
    Task(std::string description, Frames payload, std::function<void(const Frames &)> send_partial,
         std::optional<Clock::time_point> deadline = std::nullopt,
         std::shared_ptr<const std::atomic<bool>> cancelled = nullptr)
        : description_(std::move(description)), payload_(std::move(payload)), send_partial_(std::move(send_partial)),
          deadline_(deadline), cancelled_(std::move(cancelled))
    {
    }
    const std::string &description() const { return description_; }  // the request description
    const Frames &payload() const { return payload_; }
    // Send a partial result to the client now, before the final one (a streaming handler).
    void partial(const Frames &frames) const { send_partial_(frames); }
    // When the client stops waiting for the result (nullopt: the request carries no deadline).
    std::optional<Clock::time_point> deadline() const { return deadline_; }
    // True once the broker said nobody waits for the result (cancelled, or past the deadline): stop early.
    bool cancelled() const { return cancelled_ && cancelled_->load(); }

private:
    std::string description_;
    Frames payload_;
    std::function<void(const Frames &)> send_partial_;
    std::optional<Clock::time_point> deadline_;
    std::shared_ptr<const std::atomic<bool>> cancelled_;
};

// Thrown by a handler: the client gets this status (400 to 599) and reason instead of a result. 429 with a
// retry_after is "slow down": the broker puts the task back at the head of its queue (not a failure), holds the
// service's dispatches for retry_after and lowers its dispatch rate (docs/protocol.rst, "Backpressure"). 503 with
// Reject::retry is "failed, try again": the broker retries the task after a backoff, as the service's retry
// policy allows, and the client gets this answer only once its retries are spent (docs/protocol.rst, "Retries").
class Reject : public std::runtime_error {
public:
    struct Retry {};
    static constexpr Retry retry{};

    Reject(int status, std::string reason, std::optional<std::chrono::milliseconds> retry_after = std::nullopt)
        : std::runtime_error(std::to_string(status) + ": " + reason), status_(status), reason_(std::move(reason)),
          retry_after_(retry_after)
    {
        if (status < 400 || status > 599)
            throw std::invalid_argument("a rejection's status is 400 to 599");
    }
    Reject(int status, std::string reason, Retry) : Reject(status, std::move(reason))
    {
        if (status != protocol::unavailable)
            throw std::invalid_argument("Reject::retry goes with status 503");
        retry_ = true;
    }
    int status() const { return status_; }
    const std::string &reason() const { return reason_; }
    std::optional<std::chrono::milliseconds> retry_after() const { return retry_after_; }
    bool retried() const { return retry_; }

    // The result frames: the reason, then the retry mark (503 with Reject::retry) or (429 only) the retry-after in
    // seconds as decimal text.
    Frames frames() const
    {
        Frames out{reason_};
        if (retry_)
            out.emplace_back(protocol::retry_mark);
        else if (status_ == protocol::too_many && retry_after_) {
            const long long ms = std::max<long long>(0, retry_after_->count());
            std::string digits = std::to_string(ms / 1000) + "." + std::to_string(1000 + ms % 1000).substr(1);
            out.push_back(std::move(digits));
        }
        return out;
    }

private:
    int status_;
    std::string reason_;
    std::optional<std::chrono::milliseconds> retry_after_;
    bool retry_ = false;
};

namespace detail {

// Waits after refusals: 1 s, doubled after each refusal in a row up to 60 s, each drawn within a quarter of its
// step (workers refused together do not come back together); reset() once the broker answers a READY.
class Backoff {
public:
    std::chrono::milliseconds next()
    {
        const auto step = step_;
        step_ = std::min(step_ * 2, most);
        std::uniform_real_distribution<double> jitter(0.75, 1.25);
        const auto wait = std::chrono::milliseconds(static_cast<long long>(step.count() * jitter(random_)));
        return std::min(wait, most);
    }
    void reset() { step_ = first; }

private:
    static constexpr std::chrono::milliseconds first{1000}, most{60000};
    std::chrono::milliseconds step_ = first;
    std::mt19937 random_{std::random_device{}()};
};

// The worker's name for itself across its reconnects (its peer info's id): 32 random hex digits. A READY with it
// from a new socket retires the registration of the old one at the broker.
inline std::string worker_id()
{
    std::random_device source;
    std::uniform_int_distribution<int> digit(0, 15);
    std::string id(32, '0');
    for (auto &c : id)
        c = "0123456789abcdef"[digit(source)];
    return id;
}

}  // namespace detail

struct WorkerOptions {
    std::chrono::milliseconds heartbeat_interval{2500};
    int liveness = 3;         // silent heartbeat intervals before the worker reconnects
    void *context = nullptr;  // a libzmq context to use; by default the worker makes its own
};

class Worker {
public:
    // The handler returns the result frames; an exception becomes a 500 reply carrying its what().
    using Handler = std::function<Frames(const Task &)>;

    // Starts serving at once, on a thread of its own, until stop() or destruction.
    Worker(std::string endpoint, std::string description, Handler handler, WorkerOptions options = {})
        : Worker(std::vector<std::string>{std::move(endpoint)}, std::move(description), std::move(handler), options)
    {
    }

    // Several endpoints (a replacement broker started elsewhere): the first, and the next one, in turn, each
    // time the broker falls silent.
    Worker(std::vector<std::string> endpoints, std::string description, Handler handler, WorkerOptions options = {})
        : description_(std::move(description)), handler_(std::move(handler)), options_(options),
          context_(options.context), connection_(context_.get(), std::move(endpoints))
    {
        handler_thread_ = std::thread([this] { run_handler(); });
        io_thread_ = std::thread([this] { serve(); });
    }

    // A handler that needs only the payload.
    Worker(std::string endpoint, std::string description, std::function<Frames(const Frames &)> handler,
           WorkerOptions options = {})
        : Worker(std::move(endpoint), std::move(description),
                 Handler([handler = std::move(handler)](const Task &task) { return handler(task.payload()); }),
                 options)
    {
    }

    Worker(const Worker &) = delete;
    Worker &operator=(const Worker &) = delete;
    ~Worker()
    {
        stop();
        wait();
    }

    // Make the worker leave: the broker is told at once (a running task is reissued and its result
    // discarded). Returns at once; any thread. wait() returns once the worker has stopped.
    void stop()
    {
        stopping_ = true;
        connection_.wake();
    }

    // Wait until the worker has stopped: DISCONNECT sent, the handler returned, both threads ended.
    void wait()
    {
        std::lock_guard<std::mutex> lock(stop_mutex_);
        if (io_thread_.joinable())
            io_thread_.join();
    }

    bool busy() const { return busy_; }
    // Why the broker refuses this worker's connection (the other transport, or CURVE), as the socket monitor
    // said within about a second; nullopt while no handshake failed since the last one that succeeded.
    std::optional<HandshakeFailure> handshake_failure()
    {
        std::lock_guard<std::mutex> lock(task_mutex_);
        return failure_;
    }
    std::uint64_t tasks_done() const { return tasks_done_; }
    std::uint64_t reconnects() const { return reconnects_; }
    // READYs the broker answered with DISCONNECT (the description, or the key's role): after each the worker
    // waits longer before it registers again (see detail::Backoff).
    std::uint64_t refusals() const { return refusals_; }

    // Results held now (sent, not yet acknowledged by a hand-over broker). At most this many, and bytes:
    static constexpr std::size_t hold_results = 1024;
    static constexpr std::size_t hold_bytes = 64u << 20;

private:
    struct Result {
        std::string task_id;
        int status;
        Frames frames;
    };

    // ---------------------------------------------------------------------------------------- IO thread

    void serve()
    {
        const auto interval = options_.heartbeat_interval;
        const auto expiry = interval * options_.liveness;
        const std::string heartbeat = protocol::worker_message(protocol::worker_heartbeat);
        connection_.send(ready());
        auto heard = Clock::now();
        auto next_heartbeat = heard + interval;
        bool refused = false;  // the broker refused the READY: nothing goes out until retry_at
        auto retry_at = heard;
        while (!stopping_) {
            const auto next = refused ? retry_at : next_heartbeat;
            const auto due = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
            connection_.wait(connection_.backlogged() ? 10 : std::max<long>(0, static_cast<long>(due.count())));
            connection_.flush();
            if (stopping_)
                break;
            if (connection_.read_monitor()) {
                std::lock_guard<std::mutex> lock(task_mutex_);
                failure_ = connection_.handshake().failure();  // it keeps trying: a broker may be fixed
            }
            if (auto result = take_result()) {
                busy_ = false;
                ++tasks_done_;
                resumed_ = false;
                connection_.send(protocol::ready(description_, result->task_id, result->status, result->frames));
                if (unsent_)
                    send_held();  // this READY registered a new socket: the held results follow it
                if (handover_ != Handover::no)
                    hold(result->task_id, protocol::handover(result->task_id, result->status, result->frames));
                heard = Clock::now();  // the broker's heartbeats were read meanwhile
            }
            while (auto frames = connection_.recv()) {
                heard = Clock::now();
                auto command = protocol::parse_worker_command(std::move(*frames));
                if (!command)
                    continue;  // not a GDP worker command: the broker never sends one
                if (command->command == protocol::worker_disconnect) {
                    if (refused)
                        continue;  // refused already: the wait goes on
                    if (!answered_ && resumed_) {
                        resume_ = false;  // that RESUME was refused: this task's result goes in READY
                    } else if (!answered_ && !busy_) {  // that READY was refused: wait, then try the other form
                        plain_ = !plain_;  // (a broker older than peer info takes one as malformed)
                        ++refusals_;
                        refused = true;
                        retry_at = Clock::now() + backoff_.next();
                        break;
                    }
                    reconnect();
                    break;
                }
                answered_ = true;
                backoff_.reset();
                if (command->command == protocol::worker_heartbeat) {
                    acknowledged(command->args);
                    continue;
                }
                if (command->command == protocol::worker_cancel) {
                    std::lock_guard<std::mutex> lock(task_mutex_);
                    if (busy_ && running_cancel_ && command->args[0] == running_id_)
                        running_cancel_->store(true);
                    continue;
                }
                if (command->command == protocol::worker_request && !busy_)
                    hand_over(std::move(command->args), command->deadline);  // a task while another runs: ignored
            }
            const auto now = Clock::now();
            if (refused) {
                if (now < retry_at)
                    continue;  // no heartbeat, no silence while it waits
                refused = false;
                reconnect(false, false);  // (no goodbye: the broker let that socket go)
                heard = now;
                next_heartbeat = now + interval;
                continue;
            }
            if (!busy_ && now - heard > expiry) {
                reconnect(true);  // silent: the next endpoint, if there are several
                heard = now;
            }
            if (now >= next_heartbeat && !connection_.backlogged()) {  // no heartbeats pile up for a gone broker
                connection_.send(heartbeat);
                next_heartbeat = now + interval;
            }
        }
        connection_.send(protocol::worker_message(protocol::worker_disconnect));
        connection_.close(500);  // DISCONNECT still leaves
        {
            std::lock_guard<std::mutex> lock(task_mutex_);
            handler_exit_ = true;
        }
        task_ready_.notify_one();
        handler_thread_.join();  // waits for a running handler to return
    }

    // A new socket (silent: to the next endpoint, if there are several): READY, or while a task runs RESUME
    // (hand-over brokers) or nothing (the result will go in READY); then the held results, once registered.
    // With a goodbye and unless a task runs (RESUME claims it), DISCONNECT on the old socket first: a broker still
    // hearing it lets that registration go at once.
    void reconnect(bool silent = false, bool goodbye = true)
    {
        ++reconnects_;
        goodbye = goodbye && !busy_;
        if (goodbye)
            connection_.send(protocol::worker_message(protocol::worker_disconnect));
        connection_.reopen(silent, goodbye ? farewell_linger_ms : 0);
        answered_ = false;
        resumed_ = false;
        unsent_ = !held_.empty();
        if (!busy_) {
            connection_.send(ready());
        } else if (handover_ != Handover::no && resume_) {  // (a task may come before the first heartbeat)
            resumed_ = true;
            connection_.send(protocol::resume(description_, running_id_, plain_ ? 0 : ::getpid(), id_));
        } else {
            return;  // unregistered until the result goes in READY: the held results go after it
        }
        send_held();
    }

    // A heartbeat: a hand-over broker names its instance and the results it took (their nonces).
    void acknowledged(const Frames &args)
    {
        if (args.empty()) {  // a broker that takes no hand-over: holding results is for nothing
            handover_ = Handover::no;
            held_.clear();
            held_size_ = 0;
            return;
        }
        handover_ = Handover::yes;
        for (std::size_t i = 1; i < args.size(); ++i) {
            for (auto it = held_.begin(); it != held_.end(); ++it) {
                if (it->first == args[i]) {
                    held_size_ -= it->second.size();
                    held_.erase(it);
                    break;
                }
            }
        }
        if (!instance_.empty() && instance_ != args[0] && !held_.empty())
            unsent_ = true;  // the broker restarted: it may not have them
        instance_ = args[0];
        send_held();
    }

    void hold(const std::string &task_id, std::string packed)
    {
        if (packed.size() > hold_bytes)
            return;
        held_size_ += packed.size();
        held_.emplace_back(task_id.substr(0, protocol::nonce_bytes), std::move(packed));
        while (held_.size() > hold_results || held_size_ > hold_bytes) {
            held_size_ -= held_.front().second.size();
            held_.pop_front();
        }
    }

    // HANDOVER each held result, if this registration has not had them yet (and the broker's heartbeats have not
    // said that it takes no hand-over).
    void send_held()
    {
        if (!unsent_ || handover_ == Handover::no)
            return;
        unsent_ = false;
        for (const auto &entry : held_)
            connection_.send(entry.second);
    }

    // READY, with peer info (pid, features) unless a broker refused that form.
    std::string ready()
    {
        answered_ = false;
        return plain_ ? protocol::ready(description_) : protocol::ready_with_info(description_, ::getpid(), id_);
    }

    // args: task id, request description, payload...
    void hand_over(Frames &&args, std::optional<std::chrono::milliseconds> deadline)
    {
        busy_ = true;
        resume_ = true;
        {
            std::lock_guard<std::mutex> lock(task_mutex_);
            task_id_ = std::move(args[0]);
            task_description_ = std::move(args[1]);
            task_payload_.assign(std::make_move_iterator(args.begin() + 2), std::make_move_iterator(args.end()));
            task_deadline_ = deadline ? std::optional<Clock::time_point>(Clock::now() + *deadline) : std::nullopt;
            running_id_ = task_id_;
            running_cancel_ = std::make_shared<std::atomic<bool>>(false);
            has_task_ = true;
        }
        task_ready_.notify_one();
    }

    std::optional<Result> take_result()
    {
        std::lock_guard<std::mutex> lock(task_mutex_);
        std::optional<Result> result = std::move(result_);
        result_.reset();
        return result;
    }

    // ---------------------------------------------------------------------------------------- handler thread

    void run_handler()
    {
        while (true) {
            std::string task_id;
            std::string description;
            Frames payload;
            std::optional<Clock::time_point> deadline;
            std::shared_ptr<const std::atomic<bool>> cancelled;
            {
                std::unique_lock<std::mutex> lock(task_mutex_);
                task_ready_.wait(lock, [this] { return has_task_ || handler_exit_; });
                if (!has_task_)
                    return;
                has_task_ = false;
                task_id = std::move(task_id_);
                description = std::move(task_description_);
                payload = std::move(task_payload_);
                deadline = task_deadline_;
                cancelled = running_cancel_;
            }
            // Partials go on the IO thread's current socket (after a RESUME, to the broker that took the task over).
            Task task(
                std::move(description), std::move(payload),
                [this, &task_id](const Frames &frames) {
                    if (!stopping_)
                        connection_.send(protocol::partial(task_id, frames));
                },
                deadline, cancelled);
            Result result{task_id, protocol::ok, {}};
            try {
                result.frames = handler_(task);
            } catch (const Reject &rejected) {
                result = Result{task_id, rejected.status(), rejected.frames()};
            } catch (const std::exception &error) {
                result = Result{task_id, protocol::worker_error, {error.what()}};
            } catch (...) {
                result = Result{task_id, protocol::worker_error, {"unknown exception"}};
            }
            {
                std::lock_guard<std::mutex> lock(task_mutex_);
                result_ = std::move(result);
            }
            connection_.wake();
        }
    }

    std::string description_;
    const std::string id_ = detail::worker_id();  // its name across reconnects (see detail::worker_id)
    static constexpr int farewell_linger_ms = 200;  // the old socket's time to send its DISCONNECT on reconnect
    Handler handler_;
    WorkerOptions options_;
    detail::Context context_;
    detail::Connection connection_;
    std::atomic<bool> stopping_{false}, busy_{false};
    std::atomic<std::uint64_t> tasks_done_{0}, reconnects_{0}, refusals_{0};
    detail::Backoff backoff_;  // IO thread
    std::mutex task_mutex_;  // guards the hand-over below, both ways
    std::condition_variable task_ready_;
    bool has_task_ = false, handler_exit_ = false;
    std::string task_id_, task_description_;
    Frames task_payload_;
    std::optional<Clock::time_point> task_deadline_;
    std::string running_id_;                             // the task handed over last (IO thread)
    std::shared_ptr<std::atomic<bool>> running_cancel_;  // its cancelled flag, shared with its Task
    bool answered_ = false, plain_ = false;              // IO thread: the broker spoke since READY; READY form
    std::optional<Result> result_;
    // The hand-over state, the IO thread's alone.
    enum class Handover { unknown, yes, no };
    Handover handover_ = Handover::unknown;  // whether the broker's heartbeats name an instance
    std::string instance_;                   // the broker's, as its heartbeats name it
    std::deque<std::pair<std::string, std::string>> held_;  // (nonce, packed HANDOVER) of results not yet taken
    std::size_t held_size_ = 0;
    bool unsent_ = false;      // held results this registration has not had yet
    bool resumed_ = false;     // this socket began with RESUME
    bool resume_ = true;       // RESUME may be tried for the running task
    std::optional<HandshakeFailure> failure_;  // the monitor's latest word (guarded by task_mutex_)
    std::mutex stop_mutex_;  // serialises wait() callers
    std::thread handler_thread_, io_thread_;
};

}  // namespace generaldomo
