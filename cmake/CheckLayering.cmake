cmake_minimum_required(VERSION 3.25)
# Fails when a source file includes across a layer boundary.
#   src/core    : the C++ standard library and core/ only
#   src/config  : + yaml-cpp
#   src/metrics : + prometheus-cpp
#   src/proxy, src/quota, main : anything
# Run as: cmake -DSRC=<path to src> -P CheckLayering.cmake
set(_std_headers
  algorithm any array atomic bit bitset cassert cctype cerrno cfloat charconv chrono cinttypes
  climits cmath compare concepts cstddef cstdint cstdio cstdlib cstring ctime deque exception
  functional initializer_list iomanip ios iosfwd iostream istream iterator limits list map
  memory memory_resource new numbers numeric optional ostream queue random ratio set span
  sstream stdexcept string string_view system_error tuple type_traits unordered_map
  unordered_set utility variant vector)

function(levee_check layer allowed_prefixes)
  file(GLOB_RECURSE files "${SRC}/${layer}/*.hpp" "${SRC}/${layer}/*.cpp")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS lines)
      string(REGEX MATCH "[<\"]([^>\"]+)[>\"]" _m "${line}")
      set(inc "${CMAKE_MATCH_1}")
      set(ok FALSE)
      if(inc IN_LIST _std_headers)
        set(ok TRUE)
      endif()
      foreach(p IN LISTS allowed_prefixes)
        string(FIND "${inc}" "${p}" pos)
        if(pos EQUAL 0)
          set(ok TRUE)
        endif()
      endforeach()
      if(NOT ok)
        message(SEND_ERROR "layering: ${f}: src/${layer} may not include <${inc}>")
      endif()
    endforeach()
  endforeach()
endfunction()

levee_check(core "core/")
levee_check(config "core/;config/;yaml-cpp/")
levee_check(metrics "core/;metrics/;prometheus/")
