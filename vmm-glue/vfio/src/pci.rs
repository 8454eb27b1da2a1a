//! PCI configuration space offsets and bits the crate uses.

/// Vendor id (u16).
pub const VENDOR_ID: u64 = 0x00;
/// Device id (u16).
pub const DEVICE_ID: u64 = 0x02;
/// Command register (u16).
pub const COMMAND: u64 = 0x04;
/// Revision id (u8) and class code (3 bytes) as one u32.
pub const CLASS_REVISION: u64 = 0x08;

/// Command: memory space decode.
pub const COMMAND_MEMORY: u16 = 0x0002;
/// Command: bus master enable (the lender maps DMA when this is set).
pub const COMMAND_MASTER: u16 = 0x0004;
/// Command: INTx disable.
pub const COMMAND_INTX_DISABLE: u16 = 0x0400;

/// Class code of an NVMe controller (mass storage, NVM, NVMe).
pub const CLASS_NVME: u32 = 0x01_08_02;

/// The 24-bit class code from the dword at [`CLASS_REVISION`].
pub fn class_code(class_revision: u32) -> u32 {
    class_revision >> 8
}
