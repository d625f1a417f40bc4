// tests/cpp/gd_client.cpp: generaldomo::Client driven the ways the cross-language tests need.
//
// gd_client --mode threads|pool|burst|once [--service echo] [--threads T] [--requests N] [--frames]
//           [--work-ms-max M] [--heartbeat-ms H] [--liveness L] [--timeout-ms W] [--wait-for-broker]
//           [--wait-for-service] [--delay-ms D] [--traceparent TP [--tracestate TS]] ENDPOINT[,ENDPOINT...]
//   threads  T std::threads share the client, each making N blocking requests "t<thread>-<n>"; prints
//            "<thread> <n> <reply>" per request, thread by thread, in order.
//   pool     a pool of T threads runs 2N tasks: task k asks "k<k>", and its answer is asked again by a
//            second-stage task, each stage run by whichever pool thread is free; prints "<k> <reply>".
//   burst    submits N requests "b<k>" at once, prints "submitted N", then waits for each; prints
//            "<k> <reply> partials <p1>,<p2>..." and finally "resent R reconnects C dropped D".
//   once     one request "once"; prints "<reply>", a timeout as "timeout <message>", then the seconds it took
//            ("took <s>").
// <reply> is the reply's frames joined by '|', or "error <status> <reason>", or "timeout". --frames sends
// three frames: the payload, an empty frame and 300 bytes "x" (a long length prefix). --work-ms-max M appends
// ":<ms>" to each payload, 0 to M ms spread over the payloads (the work a --delay-in-payload worker does for
// it). --wait-for-broker and --wait-for-service turn off ClientOptions::fail_unreachable and fail_unknown. A
// refused or unreachable broker is "handshake <kind> <cause>". --traceparent (once mode) sends that W3C trace
// context (and --tracestate) in the request's fields. --delay-ms D: burst's requests
// ask not to be dispatched before D ms from when each is submitted (RequestFields::delay). Ends with "done".
#include <generaldomo/generaldomo.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "answers.hpp"
#include "options.hpp"

namespace {

using generaldomo::Frames;
using std::chrono::milliseconds;

// A hand-made thread pool: each task is picked up by whichever thread is free.
class Pool {
public:
    explicit Pool(int threads)
    {
        for (int i = 0; i < threads; ++i)
            threads_.emplace_back([this] { work(); });
    }
    ~Pool()
    {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            done_ = true;
        }
        wake_.notify_all();
        for (auto &thread : threads_)
            thread.join();
    }
    void post(std::function<void()> task)
    {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            tasks_.push_back(std::move(task));
        }
        wake_.notify_one();
    }

private:
    void work()
    {
        while (true) {
            std::function<void()> task;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [this] { return done_ || !tasks_.empty(); });
                if (tasks_.empty())
                    return;
                task = std::move(tasks_.front());
                tasks_.pop_front();
            }
            task();
        }
    }

    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> tasks_;
    bool done_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace

int main(int argc, char **argv)
{
    const Options options(argc, argv,
                          {"--mode", "--service", "--threads", "--requests", "--heartbeat-ms", "--liveness",
                           "--timeout-ms", "--work-ms-max", "--traceparent", "--tracestate", "--delay-ms"},
                          {"--frames", "--wait-for-broker", "--wait-for-service"});
    const std::string mode = options.get("--mode", "threads");
    const std::string service = options.get("--service", "echo");
    const int threads = static_cast<int>(options.number("--threads", 4));
    const long requests = options.number("--requests", 10);
    const milliseconds timeout(options.number("--timeout-ms", 60000));
    const bool frames = options.flag("--frames");
    const long work_ms_max = options.number("--work-ms-max", -1);
    generaldomo::RequestFields later;
    if (options.number("--delay-ms", -1) >= 0)
        later.delay = milliseconds(options.number("--delay-ms", 0));
    auto body = [&](const std::string &name) {
        std::string payload = name;
        if (work_ms_max >= 0) {
            unsigned long spread = 0;  // the same for a name in every run
            for (const unsigned char c : name)
                spread = spread * 131 + c;
            payload += ":" + std::to_string(spread % static_cast<unsigned long>(work_ms_max + 1));
        }
        return frames ? Frames{payload, "", std::string(300, 'x')} : Frames{payload};
    };

    generaldomo::ClientOptions settings;
    settings.heartbeat_interval = milliseconds(options.number("--heartbeat-ms", 2500));
    settings.liveness = static_cast<int>(options.number("--liveness", 3));
    settings.fail_unreachable = !options.flag("--wait-for-broker");
    settings.fail_unknown = !options.flag("--wait-for-service");
    generaldomo::Client client(options.endpoints(), settings);

    if (mode == "threads") {
        for (const auto &line : ask_from_threads(client, service, threads, requests, timeout, body))
            std::printf("%s\n", line.c_str());
    } else if (mode == "pool") {
        std::mutex mutex;
        std::condition_variable finished;
        std::map<long, std::string> results;
        {
            Pool pool(threads);
            for (long k = 0; k < requests; ++k)
                pool.post([&, k] {
                    const std::string first =
                        answer([&] { return client.request(service, body("k" + std::to_string(k)), timeout); });
                    pool.post([&, k, first] {
                        const std::string second = answer([&] { return client.request(service, {first}, timeout); });
                        std::lock_guard<std::mutex> lock(mutex);
                        results[k] = second;
                        finished.notify_one();
                    });
                });
            std::unique_lock<std::mutex> lock(mutex);
            const auto deadline = std::chrono::steady_clock::now() + 4 * timeout;  // each task waits twice at most
            finished.wait_until(lock, deadline, [&] { return static_cast<long>(results.size()) == requests; });
        }  // the pool's threads end here, once the tasks they run are done
        for (const auto &[k, result] : results)
            std::printf("%ld %s\n", k, result.c_str());
    } else if (mode == "burst") {
        std::mutex mutex;
        std::vector<std::vector<std::string>> partials(requests);
        std::vector<std::future<generaldomo::Reply>> futures;
        for (long k = 0; k < requests; ++k)
            futures.push_back(client.submit(service, body("b" + std::to_string(k)),
                                            [&, k](const generaldomo::Reply &partial) {
                                                std::lock_guard<std::mutex> lock(mutex);
                                                partials[k].push_back(join(partial.frames));
                                            },
                                            later));
        std::printf("submitted %ld\n", requests);
        std::fflush(stdout);
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (long k = 0; k < requests; ++k) {
            const std::string result = answer([&] {
                if (futures[k].wait_until(deadline) != std::future_status::ready)
                    throw generaldomo::Timeout("timeout");
                return futures[k].get();
            });
            std::lock_guard<std::mutex> lock(mutex);
            std::string seen;
            for (const auto &partial : partials[k])
                seen += (seen.empty() ? "" : ",") + partial;
            std::printf("%ld %s partials %s\n", k, result.c_str(), seen.c_str());
        }
        std::printf("resent %llu reconnects %llu dropped %llu\n", static_cast<unsigned long long>(client.resent()),
                    static_cast<unsigned long long>(client.reconnects()),
                    static_cast<unsigned long long>(client.replies_dropped()));
    } else if (mode == "once") {
        const auto start = std::chrono::steady_clock::now();
        std::string said;
        const std::string got = answer([&]() -> generaldomo::Reply {
            try {
                generaldomo::RequestFields fields;
                fields.traceparent = options.get("--traceparent", "");
                fields.tracestate = options.get("--tracestate", "");
                return client.request(service, body("once"), timeout, fields);
            } catch (const generaldomo::Timeout &error) {  // answer() keeps only the word; here the message counts
                said = error.what();
                throw;
            }
        });
        std::printf("%s%s\n", got.c_str(), said.empty() ? "" : (" " + said).c_str());
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        std::printf("took %.1f\n", took.count());
    } else {
        Options::usage(argv[0], "unknown mode " + mode);
    }
    std::printf("done\n");
    return 0;
}
