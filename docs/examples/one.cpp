#include <generaldomo/embedded.hpp>  // first: it includes Python.h
#include <generaldomo/generaldomo.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char **argv)
{
    generaldomo::EmbeddedOptions settings;  // the flags of `generaldomo broker`, as key/value pairs
    settings.settings = {{"server", "inproc://tasks"},                                   // this program's threads
                         {"router", argc > 1 ? argv[1] : "tcp://127.0.0.1:5555"},         // workers, MDP peers
                         {"flow", "echo:concurrency=32"}};
    generaldomo::EmbeddedBroker broker(settings);  // bound when it returns; throws BrokerError if it cannot
    std::printf("workers: %s\n", broker.endpoint("router", "tcp").c_str());
    std::fflush(stdout);

    generaldomo::ClientOptions options;
    options.context = broker.context();  // inproc:// works between sockets of one context
    generaldomo::Client client("inproc://tasks", options);
    std::vector<int> wrong(16);
    std::vector<std::thread> pool;
    for (int t = 0; t < 16; ++t)
        pool.emplace_back([&client, &wrong, t] {
            for (int n = 0; n < 100; ++n) {
                const std::string task = "task " + std::to_string(t) + "." + std::to_string(n);
                auto reply = client.request("echo", {task}, std::chrono::seconds(60));
                const std::string &got = reply.payload();
                if (got.size() < task.size() || got.compare(got.size() - task.size(), task.size(), task) != 0)
                    ++wrong[t];  // never: each thread gets its own answers
            }
        });
    for (auto &thread : pool)
        thread.join();
    for (int t = 0; t < 16; ++t)
        std::printf("thread %d: 100 answers, %d not its own\n", t, wrong[t]);
    broker.stop();  // what it still holds is answered, or failed with 503: nothing is lost
}
