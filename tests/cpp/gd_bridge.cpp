// tests/cpp/gd_bridge.cpp: generaldomo::Bridge as a program, with the command line of `generaldomo bridge`.
//
// gd_bridge --server ENDPOINT [--server ...] [--heartbeat-ms H] [--liveness L] [--idle-timeout-ms I]
//           [--max-in-flight N] [--connection-queue-bytes B] BROKER_ENDPOINT
// Prints "generaldomo bridge: server <endpoint> -> MDP/0.1 broker <broker>" for each bound endpoint, as the Python
// command does, then reads commands on stdin: "stats <n>" prints "stats <n> forwarded F dealers D refused R
// dropped X errors E serving S"; "stop" (or the end of stdin) stops the bridge, prints "stopped" and exits 0
// (1 and the error if the bridge had failed).
#include <generaldomo/bridge.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "options.hpp"

int main(int argc, char **argv)
{
    const Options options(argc, argv, {"--heartbeat-ms", "--liveness", "--idle-timeout-ms", "--max-in-flight", "--connection-queue-bytes"}, {},
                          {"--server"});
    generaldomo::BridgeOptions settings;
    settings.heartbeat_interval = std::chrono::milliseconds(options.number("--heartbeat-ms", 2500));
    settings.liveness = static_cast<int>(options.number("--liveness", 3));
    settings.idle_timeout = std::chrono::milliseconds(options.number("--idle-timeout-ms", 30000));
    settings.max_in_flight = static_cast<std::size_t>(options.number("--max-in-flight", 512));
    settings.connection_queue_bytes =
        static_cast<std::size_t>(options.number("--connection-queue-bytes", static_cast<long>(16u << 20)));
    generaldomo::Bridge bridge(options.list("--server"), options.endpoint, settings);
    for (const auto &endpoint : bridge.endpoints())
        std::printf("generaldomo bridge: server %s -> MDP/0.1 broker %s\n", endpoint.c_str(), options.endpoint.c_str());
    std::fflush(stdout);
    std::string line;
    while (std::getline(std::cin, line) && line != "stop") {
        std::istringstream words(line);
        std::string command, tag;
        words >> command >> tag;
        if (command != "stats")
            continue;
        std::printf("stats %s forwarded %llu dealers %zu refused %llu dropped %llu errors %llu serving %d\n",
                    tag.c_str(), static_cast<unsigned long long>(bridge.forwarded()), bridge.dealers(),
                    static_cast<unsigned long long>(bridge.refused_in_flight()),
                    static_cast<unsigned long long>(bridge.dropped()),
                    static_cast<unsigned long long>(bridge.internal_errors()), bridge.serving() ? 1 : 0);
        std::fflush(stdout);
    }
    try {
        bridge.stop();
    } catch (const generaldomo::BridgeFailed &error) {
        std::printf("%s\n", error.what());
        return 1;
    }
    std::printf("stopped\n");
    return 0;
}
