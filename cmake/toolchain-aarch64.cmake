# Cross build for 64-bit ARM Linux with Debian's aarch64 cross compilers
# (scripts/require-arm64.sh installs them): cmake -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake.
# Tests run under qemu's user-mode emulator (CMAKE_CROSSCOMPILING_EMULATOR), with the CPU model
# given by QMOE_ARM64_CPU (max: dotprod + I8MM; cortex-a76: dotprod only; cortex-a57: ARMv8.0).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(QMOE_ARM64_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${QMOE_ARM64_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${QMOE_ARM64_TRIPLE}-g++)
set(QMOE_ARM64_SYSROOT /usr/${QMOE_ARM64_TRIPLE})
set(CMAKE_FIND_ROOT_PATH ${QMOE_ARM64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(QMOE_ARM64_CPU "max" CACHE STRING "qemu CPU model the tests run on")
find_program(QMOE_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static REQUIRED)
# -L: the target's dynamic loader and libraries.
set(CMAKE_CROSSCOMPILING_EMULATOR ${QMOE_QEMU_AARCH64};-L;${QMOE_ARM64_SYSROOT};-cpu;${QMOE_ARM64_CPU})
