// tests/cpp/options.hpp: the command line of the C++ test peers (--name value options, repeatable ones, flags,
// one endpoint).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>
#include <vector>

struct Options {
    std::map<std::string, std::string> values;
    std::map<std::string, std::vector<std::string>> lists;  // the repeatable options' values, in order
    std::set<std::string> flags;
    std::string endpoint;

    // known: option names taking a value; flags: options without one; repeatable: options that take a value each
    // time they are given. Exits 2 on anything else.
    Options(int argc, char **argv, const std::set<std::string> &known, const std::set<std::string> &flag_names,
            const std::set<std::string> &repeatable = {})
    {
        for (int i = 1; i < argc; ++i) {
            const std::string arg = argv[i];
            if (repeatable.count(arg) && i + 1 < argc) {
                lists[arg].push_back(argv[++i]);
            } else if (known.count(arg) && i + 1 < argc) {
                values[arg] = argv[++i];
            } else if (flag_names.count(arg)) {
                flags.insert(arg);
            } else if (arg.rfind("-", 0) != 0 && endpoint.empty()) {
                endpoint = arg;
            } else {
                usage(argv[0], "unexpected argument " + arg);
            }
        }
        if (endpoint.empty())
            usage(argv[0], "no endpoint");
    }

    std::string get(const std::string &name, const std::string &fallback) const
    {
        auto found = values.find(name);
        return found == values.end() ? fallback : found->second;
    }

    long number(const std::string &name, long fallback) const
    {
        auto found = values.find(name);
        if (found == values.end())
            return fallback;
        char *end = nullptr;
        const long value = std::strtol(found->second.c_str(), &end, 10);
        if (*end != '\0' || value < 0)
            usage("", name + " needs a non-negative number");
        return value;
    }

    bool flag(const std::string &name) const { return flags.count(name) > 0; }

    // The endpoint argument as a list: "A,B" names two brokers, tried in turn.
    std::vector<std::string> endpoints() const
    {
        std::vector<std::string> found;
        std::string::size_type start = 0;
        while (true) {
            const auto comma = endpoint.find(',', start);
            found.push_back(endpoint.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
            if (comma == std::string::npos)
                return found;
            start = comma + 1;
        }
    }

    std::vector<std::string> list(const std::string &name) const
    {
        auto found = lists.find(name);
        return found == lists.end() ? std::vector<std::string>{} : found->second;
    }

    [[noreturn]] static void usage(const std::string &program, const std::string &why)
    {
        std::fprintf(stderr, "%s: %s\n", program.c_str(), why.c_str());
        std::exit(2);
    }
};
