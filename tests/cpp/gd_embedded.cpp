// tests/cpp/gd_embedded.cpp: generaldomo::EmbeddedBroker with generaldomo::Client threads over inproc, for the
// one-program tests and the bench.
//
// gd_embedded --mode threads|stop|payload [--set KEY=VALUE]... [--service S] [--threads T] [--requests N]
//             [--size BYTES] [--via inproc|tcp] [--echo] [--drain-ms D] [--timeout-ms W] INPROC_ENDPOINT
// It embeds a broker with a SERVER link bound to INPROC_ENDPOINT and the --set settings (the broker command's
// flags as key=value), prints "endpoint <transport> <endpoint>" for each bound endpoint and "ready", and waits
// for a line on stdin before it asks anything (the test starts the workers meanwhile). Then:
//   threads  T std::threads share one Client, each making N blocking requests "t<thread>-<n>"; prints
//            "<thread> <n> <reply>" per request, thread by thread, in order; then "status <mmi.status JSON>".
//   stop     submits N requests "b<k>" at once, prints "submitted N", waits for a second line on stdin, stops
//            the broker (serving what it holds for --drain-ms), then prints "<k> <reply>" for each and
//            "answered A failed F lost L" (failed: a 503 answer; lost: no answer at all).
//   payload  N requests, one after the other, of --size bytes, over inproc or the broker's tcp SERVER link, each
//            answered with its size in decimal (or, with --echo, with itself); prints "payload <size> via <via>
//            requests N wall_us W broker_cpu_us B process_cpu_us P" (each per request: wall time, the broker
//            thread's CPU time, the whole process's CPU time), or "unexpected reply of <n> bytes".
// <reply> is as tests/cpp/answers.hpp writes it. The threads and payload modes then stop the broker. Ends with
// "stopped" and "done"; a BrokerError prints "broker error: <what>" and exits 3. --own-python: the program starts
// Python itself first and holds the GIL while it makes and stops the broker (releasing it meanwhile), then
// prints "python: the broker ran here: True" (the broker used that interpreter).
#include <generaldomo/embedded.hpp>
#include <generaldomo/generaldomo.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "answers.hpp"
#include "options.hpp"

namespace {

using generaldomo::Frames;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

void say(const std::string &line)
{
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
}

// Initialise Python as a program that runs Python itself would, in the environment of $GENERALDOMO_PYTHON.
void start_python()
{
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;
    if (const char *python = std::getenv("GENERALDOMO_PYTHON"))
        PyConfig_SetBytesString(&config, &config.executable, python);
    const PyStatus status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status))
        Py_ExitStatusException(status);
}

void wait_for_line()
{
    std::string line;
    std::getline(std::cin, line);
}

double process_cpu_seconds()
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval &t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

void stop_mode(generaldomo::EmbeddedBroker &broker, generaldomo::Client &client, const std::string &service,
               long requests, milliseconds drain, milliseconds timeout)
{
    std::vector<std::future<generaldomo::Reply>> futures;
    for (long k = 0; k < requests; ++k)
        futures.push_back(client.submit(service, {"b" + std::to_string(k)}));
    say("submitted " + std::to_string(requests));
    wait_for_line();
    broker.stop(drain);
    long answered = 0, failed = 0, lost = 0;
    const auto deadline = Clock::now() + timeout;
    for (long k = 0; k < requests; ++k) {
        const std::string text = answer([&] {
            if (futures[k].wait_until(deadline) != std::future_status::ready)
                throw generaldomo::Timeout("timeout");
            return futures[k].get();
        });
        if (text.rfind("error 503 ", 0) == 0)
            ++failed;
        else if (text == "timeout" || text.rfind("error", 0) == 0)
            ++lost;
        else
            ++answered;
        say(std::to_string(k) + " " + text);
    }
    say("answered " + std::to_string(answered) + " failed " + std::to_string(failed) + " lost " +
        std::to_string(lost));
}

void payload_mode(generaldomo::EmbeddedBroker &broker, generaldomo::Client &client, const std::string &service,
                  std::size_t size, long requests, const std::string &via, bool echo, milliseconds timeout)
{
    Frames body{std::string(size, '\0')};
    for (std::size_t i = 0; i < size; ++i)
        body[0][i] = static_cast<char>(i % 251);  // no two nearby bytes alike: a misplaced byte shows
    const std::string expected = echo ? body[0] : std::to_string(size);
    const std::string warm = answer([&] { return client.request(service, body, timeout); });  // connections made
    if (warm != expected) {
        say("unexpected reply of " + std::to_string(warm.size()) + " bytes");
        return;
    }
    const auto wall = Clock::now();
    const auto broker_cpu = broker.cpu_time();
    const double process_cpu = process_cpu_seconds();
    for (long n = 0; n < requests; ++n) {
        const std::string got = answer([&] { return client.request(service, body, timeout); });
        if (got != expected) {
            say("unexpected reply of " + std::to_string(got.size()) + " bytes");
            return;
        }
    }
    const double per = 1e6 / static_cast<double>(requests);
    const double wall_us = std::chrono::duration<double>(Clock::now() - wall).count() * per;
    const double broker_us = std::chrono::duration<double>(broker.cpu_time() - broker_cpu).count() * per;
    const double process_us = (process_cpu_seconds() - process_cpu) * per;
    char line[256];
    std::snprintf(line, sizeof line, "payload %zu via %s requests %ld wall_us %.1f broker_cpu_us %.1f process_cpu_us %.1f",
                  size, via.c_str(), requests, wall_us, broker_us, process_us);
    say(line);
}

}  // namespace

int main(int argc, char **argv)
{
    const Options options(argc, argv,
                          {"--mode", "--service", "--threads", "--requests", "--size", "--via", "--drain-ms",
                           "--timeout-ms"},
                          {"--echo", "--own-python"}, {"--set"});
    const std::string mode = options.get("--mode", "threads");
    const std::string service = options.get("--service", mode == "payload" ? "sink" : "echo");
    const long requests = options.number("--requests", 10);
    const milliseconds drain(options.number("--drain-ms", 10000));
    const milliseconds timeout(options.number("--timeout-ms", 60000));
    const std::string via = options.get("--via", "inproc");

    generaldomo::EmbeddedOptions settings;
    settings.settings.emplace_back("server", options.endpoint);
    for (const auto &pair : options.list("--set")) {
        const auto equals = pair.find('=');
        if (equals == std::string::npos)
            Options::usage(argv[0], "--set wants KEY=VALUE, not " + pair);
        settings.settings.emplace_back(pair.substr(0, equals), pair.substr(equals + 1));
    }
    const bool own_python = options.flag("--own-python");
    if (own_python)
        start_python();  // the program's own interpreter; this thread holds the GIL
    try {
        generaldomo::EmbeddedBroker broker(settings);
        for (const auto &[transport, endpoint] : broker.endpoints())
            say("endpoint " + transport + " " + endpoint);
        say("ready");
        PyThreadState *saved = own_python ? PyEval_SaveThread() : nullptr;  // as a program does while C++ runs
        wait_for_line();
        {
            generaldomo::ClientOptions client_options;
            client_options.context = broker.context();  // inproc:// reaches the broker only on its context
            const std::string endpoint = via == "tcp" ? broker.endpoint("server", "tcp") : options.endpoint;
            generaldomo::Client client(endpoint, client_options);
            if (mode == "threads") {
                const int threads = static_cast<int>(options.number("--threads", 16));
                auto one_frame = [](const std::string &payload) { return Frames{payload}; };
                for (const auto &line : ask_from_threads(client, service, threads, requests, timeout, one_frame))
                    say(line);
                say("status " + client.request("mmi.status", {}, timeout).payload());
            }
            else if (mode == "stop")
                stop_mode(broker, client, service, requests, drain, timeout);
            else if (mode == "payload")
                payload_mode(broker, client, service, static_cast<std::size_t>(options.number("--size", 16)),
                             requests, via, options.flag("--echo"), timeout);
            else
                Options::usage(argv[0], "unknown mode " + mode);
        }
        if (saved)
            PyEval_RestoreThread(saved);  // stop() with the GIL held, as the constructor was called
        broker.stop(drain);
        say("stopped");
        if (own_python)
            PyRun_SimpleString("import sys\nprint('python: the broker ran here:', 'generaldomo.cli.embedded' in "
                               "sys.modules, flush=True)");
    } catch (const generaldomo::BrokerError &error) {
        say(std::string("broker error: ") + error.what());
        std::fprintf(stderr, "%s", error.traceback().c_str());
        return 3;
    }
    say("done");
    return 0;
}
