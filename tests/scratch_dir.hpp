#pragma once
// A fresh directory per test case, removed with everything in it at the end of the case.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

struct ScratchDir {
    std::filesystem::path path;
    /// <temp>/mixprec-<prefix>-<pid>-<test case name>, empty.
    explicit ScratchDir(const std::string& prefix) {
        std::string name = "mixprec-" + prefix;
        name += '-';
        name += std::to_string(::getpid());
        name += '-';
        name += boost::unit_test::framework::current_test_case().p_name.get();
        path = std::filesystem::temp_directory_path() / name;
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~ScratchDir() {
        std::error_code ec;
        std::filesystem::permissions(path, std::filesystem::perms::owner_all, ec);
        std::filesystem::remove_all(path, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    /// The names in the directory, sorted.
    std::vector<std::string> entries() const {
        std::vector<std::string> names;
        for (const auto& e : std::filesystem::directory_iterator(path)) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
};
