#include <generaldomo/generaldomo.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char **argv)
{
    generaldomo::Client client(argc > 1 ? argv[1] : "tcp://127.0.0.1:5556");  // the broker's --server link
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&client, t] {  // any thread may ask; each gets its own answers
            try {
                auto reply = client.request("echo", {"hello " + std::to_string(t)}, std::chrono::seconds(10));
                std::printf("%s\n", reply.payload().c_str());
            } catch (const std::exception &error) {  // RequestFailed (status 400, 500, 503...) or Timeout
                std::printf("thread %d: %s\n", t, error.what());
            }
        });
    for (auto &thread : threads)
        thread.join();
}
