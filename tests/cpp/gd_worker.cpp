// tests/cpp/gd_worker.cpp: an echo worker on generaldomo::Worker, for the cross-language tests.
//
// gd_worker [--service echo] [--tag T] [--delay-ms D] [--partials N] [--heartbeat-ms H] [--liveness L]
//           [--delay-in-payload] [-v] ENDPOINT[,ENDPOINT...] (several: tried in turn on silence)
// Echoes each request's frames, the first prefixed with --tag, after --partials partial results ("T<first>#i")
// and --delay-ms of work (cut short by SIGTERM, printing "interrupted <first frame>" with -v, or by the broker's
// CANCEL, printing "cancelled <first frame>"). A first frame "fail" makes the handler throw, "slow-down" answers
// 429 with retry-after 0.2 s. -v prints "request <first frame>" (and " left <ms>" with a deadline) when a task starts
// and "replied <first frame>" when it ends. On SIGTERM or SIGINT it stops (telling the broker) and prints
// "stopped after N tasks", after "refused N times" if the broker refused its READYs. With --delay-in-payload
// the delay is the number after the first frame's last ':' (milliseconds), e.g. "task-7:1500".
#include <generaldomo/generaldomo.hpp>

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "options.hpp"

namespace {

std::mutex stop_mutex;
std::condition_variable stop_signal;
bool stopping = false;

void say(const std::string &line)
{
    static std::mutex out;
    std::lock_guard<std::mutex> lock(out);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char **argv)
{
    const Options options(argc, argv, {"--service", "--tag", "--delay-ms", "--partials", "--heartbeat-ms", "--liveness"},
                          {"-v", "--delay-in-payload"});
    const std::string tag = options.get("--tag", "");
    const auto delay = std::chrono::milliseconds(options.number("--delay-ms", 0));
    const long partials = options.number("--partials", 0);
    const bool verbose = options.flag("-v");
    const bool delay_in_payload = options.flag("--delay-in-payload");

    sigset_t signals;  // blocked in every thread (the worker's inherit the mask); main waits for them
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    generaldomo::WorkerOptions settings;
    settings.heartbeat_interval = std::chrono::milliseconds(options.number("--heartbeat-ms", 2500));
    settings.liveness = static_cast<int>(options.number("--liveness", 3));

    auto handler = [&](const generaldomo::Task &task) {
        generaldomo::Frames frames = task.payload();
        const std::string first = frames.empty() ? std::string() : frames.front();
        if (verbose) {
            std::string line = "request " + first;
            if (auto deadline = task.deadline()) {
                const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - generaldomo::Clock::now());
                line += " left " + std::to_string(left.count());
            }
            say(line);
        }
        for (long i = 1; i <= partials; ++i)
            task.partial({tag + first + "#" + std::to_string(i)});
        auto work = delay;
        const auto colon = first.rfind(':');
        if (delay_in_payload && colon != std::string::npos)
            work = std::chrono::milliseconds(std::strtol(first.c_str() + colon + 1, nullptr, 10));
        const auto until = generaldomo::Clock::now() + work;
        for (;;) {
            std::unique_lock<std::mutex> lock(stop_mutex);
            const auto step = std::min(until, generaldomo::Clock::now() + std::chrono::milliseconds(10));
            if (stop_signal.wait_until(lock, step, [] { return stopping; })) {
                if (verbose)
                    say("interrupted " + first);
                return frames;  // the worker is stopping: this result is discarded
            }
            if (task.cancelled()) {
                if (verbose)
                    say("cancelled " + first);
                return frames;  // nobody waits for it: the broker drops it
            }
            if (generaldomo::Clock::now() >= until)
                break;
        }
        if (first == "slow-down")
            throw generaldomo::Reject(generaldomo::protocol::too_many, "slow down", std::chrono::milliseconds(200));
        if (first == "try-again")
            throw generaldomo::Reject(generaldomo::protocol::unavailable, "try again", generaldomo::Reject::retry);
        if (first == "fail")
            throw std::runtime_error("asked to fail");
        if (frames.empty())
            frames.emplace_back();
        frames.front() = tag + frames.front();
        if (verbose)
            say("replied " + first);
        return frames;
    };
    generaldomo::Worker worker(options.endpoints(), options.get("--service", "echo"), handler, settings);

    int received = 0;
    sigwait(&signals, &received);
    worker.stop();  // first, so that the interrupted task's result is not sent
    {
        std::lock_guard<std::mutex> lock(stop_mutex);
        stopping = true;
    }
    stop_signal.notify_all();
    worker.wait();
    if (worker.refusals() > 0)
        say("refused " + std::to_string(worker.refusals()) + " times");
    say("stopped after " + std::to_string(worker.tasks_done()) + " tasks");
    return 0;
}
