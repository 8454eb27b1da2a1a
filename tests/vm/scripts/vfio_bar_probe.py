# SPDX-License-Identifier: GPL-2.0
"""A VMM's view of a BAR mapped straight through a window (run on the
borrower host by lending.rs's direct_bar_through_window): opens an mdev
with VFIO (type1 container), reads the BAR's region info and its sparse
mmap areas, resets the device, turns memory decode on, maps the BAR,
writes and reads a word, then turns decode off and touches the mapping
from a child process, which must die of SIGBUS, and on again, when the
mapping must work again. Given the PCI address of the window the BAR is
seen through on this host, it then removes that device (as a hot-unplug
does) and touches the mapping once more: with the window gone it must die
of SIGBUS too, not reach what the window's addresses are now. Prints
`key value` lines.

usage: python3 vfio_bar_probe.py <mdev uuid> <bar> <offset> <value> [<window pci>]
"""
import ctypes
import fcntl
import mmap
import os
import signal
import struct
import sys

VFIO = ord(";") << 8
VFIO_GET_API_VERSION = VFIO | 100
VFIO_SET_IOMMU = VFIO | 102
VFIO_GROUP_GET_STATUS = VFIO | 103
VFIO_GROUP_SET_CONTAINER = VFIO | 104
VFIO_GROUP_GET_DEVICE_FD = VFIO | 106
VFIO_DEVICE_GET_REGION_INFO = VFIO | 108
VFIO_DEVICE_RESET = VFIO | 111
VFIO_TYPE1v2_IOMMU = 3
VFIO_REGION_INFO_FLAG_MMAP = 1 << 2
VFIO_REGION_INFO_FLAG_CAPS = 1 << 3
VFIO_REGION_INFO_CAP_SPARSE_MMAP = 1
CONFIG_INDEX = 7
PCI_COMMAND = 4
PCI_COMMAND_MEMORY = 2


def region_info(dev, index):
    """(flags, size, offset, sparse areas) of a region."""
    argsz = 32
    while True:
        buf = bytearray(struct.pack("IIIIQQ", argsz, 0, index, 0, 0, 0))
        buf += bytearray(argsz - 32)
        fcntl.ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, buf)
        want, flags, _, cap_off, size, off = struct.unpack_from("IIIIQQ", buf)
        if want <= argsz:
            break
        argsz = want
    areas = []
    while flags & VFIO_REGION_INFO_FLAG_CAPS and cap_off:
        cid, _, nxt = struct.unpack_from("HHI", buf, cap_off)
        if cid == VFIO_REGION_INFO_CAP_SPARSE_MMAP:
            (n,) = struct.unpack_from("I", buf, cap_off + 8)
            for i in range(n):
                areas.append(struct.unpack_from("QQ", buf, cap_off + 16 + 16 * i))
        cap_off = nxt
    return flags, size, off, areas


def set_decode(dev, cfg_off, on):
    (cmd,) = struct.unpack("H", os.pread(dev, 2, cfg_off + PCI_COMMAND))
    cmd = cmd | PCI_COMMAND_MEMORY if on else cmd & ~PCI_COMMAND_MEMORY
    os.pwrite(dev, struct.pack("H", cmd), cfg_off + PCI_COMMAND)
    (cmd,) = struct.unpack("H", os.pread(dev, 2, cfg_off + PCI_COMMAND))
    return cmd


def map_region(dev, size, offset):
    """mmap(2) of the device fd, uncached by the kernel: the address."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int, ctypes.c_long]
    addr = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_SHARED, dev, offset)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap of the BAR region")
    return addr


def word(addr):
    return ctypes.c_uint32.from_address(addr)


def touch_in_child(addr):
    """Read a word in a child: its value, or 'sigbus' if it died so."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        signal.signal(signal.SIGBUS, signal.SIG_DFL)
        os.write(w, b"%d" % word(addr).value)
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    out = os.read(r, 64).decode()
    os.close(r)
    if os.WIFSIGNALED(status):
        return "sigbus" if os.WTERMSIG(status) == signal.SIGBUS else \
            "signal%d" % os.WTERMSIG(status)
    return out


def main():
    uuid, bar, at, value = sys.argv[1], int(sys.argv[2]), int(sys.argv[3], 0), \
        int(sys.argv[4], 0)
    group = os.path.basename(os.readlink(f"/sys/bus/mdev/devices/{uuid}/iommu_group"))
    container = os.open("/dev/vfio/vfio", os.O_RDWR)
    fcntl.ioctl(container, VFIO_GET_API_VERSION)
    grp = os.open(f"/dev/vfio/{group}", os.O_RDWR)
    fcntl.ioctl(grp, VFIO_GROUP_SET_CONTAINER, struct.pack("i", container))
    fcntl.ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU)
    dev = fcntl.ioctl(grp, VFIO_GROUP_GET_DEVICE_FD, bytearray(uuid.encode() + b"\0"))

    flags, size, off, areas = region_info(dev, bar)
    print(f"probe_mmap {1 if flags & VFIO_REGION_INFO_FLAG_MMAP else 0}")
    print("probe_areas " + " ".join(f"{o:#x}+{s:#x}" for o, s in areas))
    if not flags & VFIO_REGION_INFO_FLAG_MMAP or not areas:
        return 1
    _, _, cfg_off, _ = region_info(dev, CONFIG_INDEX)
    fcntl.ioctl(dev, VFIO_DEVICE_RESET)
    print(f"probe_cmd_on {set_decode(dev, cfg_off, True)}")
    a_off, a_size = areas[0]
    base = map_region(dev, a_size, off + a_off)
    word(base + at - a_off).value = value
    print(f"probe_read {word(base + at - a_off).value}")
    print(f"probe_cmd_off {set_decode(dev, cfg_off, False)}")
    sys.stdout.flush()
    print(f"probe_after_off {touch_in_child(base + at - a_off)}")
    set_decode(dev, cfg_off, True)
    sys.stdout.flush()
    print(f"probe_after_on {touch_in_child(base + at - a_off)}")
    if len(sys.argv) > 5:
        with open(f"/sys/bus/pci/devices/{sys.argv[5]}/remove", "w") as f:
            f.write("1")
        sys.stdout.flush()
        print(f"probe_after_window_gone {touch_in_child(base + at - a_off)}")
    os.close(dev)
    return 0


if __name__ == "__main__":
    sys.exit(main())
