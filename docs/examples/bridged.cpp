#include <generaldomo/bridge.hpp>
#include <generaldomo/generaldomo.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char **argv)
{
    void *context = zmq_ctx_new();  // the bridge's and the clients' (inproc:// works within one context)
    {
        generaldomo::BridgeOptions options;
        options.context = context;
        generaldomo::Bridge bridge({"inproc://bridge"}, argc > 1 ? argv[1] : "tcp://127.0.0.1:5555", options);
        generaldomo::ClientOptions client_options;
        client_options.context = context;
        generaldomo::Client client("inproc://bridge", client_options);
        std::vector<int> wrong(16);
        std::vector<std::thread> pool;
        for (int t = 0; t < 16; ++t)
            pool.emplace_back([&client, &wrong, t] {
                for (int n = 0; n < 100; ++n) {
                    const std::string task = "task " + std::to_string(t) + "." + std::to_string(n);
                    const std::string got = client.request("echo", {task}, std::chrono::seconds(60)).payload();
                    if (got.size() < task.size() || got.compare(got.size() - task.size(), task.size(), task))
                        ++wrong[t];
                }
            });
        for (auto &thread : pool)
            thread.join();
        for (int t = 0; t < 16; ++t)
            std::printf("thread %d: 100 answers, %d not its own\n", t, wrong[t]);
        std::printf("forwarded %llu\n", static_cast<unsigned long long>(bridge.forwarded()));
    }  // the client, then the bridge, close their sockets
    zmq_ctx_term(context);
}
