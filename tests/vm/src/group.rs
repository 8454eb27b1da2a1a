//! The group check's common part (docs/groups.md): a lender's two-function
//! device (`[[host.gpu]]`: a `virtio-gpu-pci` at function 0, an `intel-hda`
//! with an `hda-duplex` codec at function 1) given to one guest. The guest
//! draws a pattern into the display's framebuffer ([`draw_script`]), which
//! is read back from outside with QMP `screendump` of the QEMU that
//! emulates the device ([`screendump`]) and compared ([`check_pattern`]);
//! and the guest's HDA driver must bind and find its codec
//! ([`audio_script`], [`check_audio`]).
//!
//! The scripts are busybox `sh` (the guest initramfs has nothing else) and
//! are made to run one after the other in one guest: each is a subshell,
//! so a failure of one does not stop the next. Run [`audio_script`] first:
//! [`draw_script`] holds the guest up after drawing, so that the picture
//! can be taken while the device still shows it.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, ensure, Context};

/// A picture: `width` x `height` pixels, rows top to bottom, 3 bytes (red,
/// green, blue) per pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Pixels per row.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// `width * height * 3` bytes.
    pub rgb: Vec<u8>,
}

impl Image {
    /// The colour of pixel (`x`, `y`).
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let i = (y as usize * self.width as usize + x as usize) * 3;
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }
}

/// Parses a binary PPM (`P6`, what QEMU's `screendump` writes): the magic,
/// width, height and largest sample value (at most 255: one byte a
/// sample) as decimal numbers separated by whitespace, with `#` comments
/// to the end of a line, one whitespace byte, then the pixels.
pub fn parse_ppm(data: &[u8]) -> anyhow::Result<Image> {
    ensure!(
        data.starts_with(b"P6"),
        "not a binary PPM: starts with {:?}",
        String::from_utf8_lossy(&data[..data.len().min(8)])
    );
    let mut pos = 2;
    let mut fields = [0u64; 3];
    for (n, field) in fields.iter_mut().enumerate() {
        // Whitespace and comments before each number; at least one byte.
        let start = pos;
        loop {
            match data.get(pos) {
                Some(b) if b.is_ascii_whitespace() => pos += 1,
                Some(b'#') => {
                    while data.get(pos).is_some_and(|&b| b != b'\n') {
                        pos += 1;
                    }
                }
                _ => break,
            }
        }
        ensure!(pos > start, "PPM header: no separator before field {n}");
        let digits = data[pos..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        ensure!(
            (1..=9).contains(&digits),
            "PPM header: field {n} is not a number of 1 to 9 digits"
        );
        *field = std::str::from_utf8(&data[pos..pos + digits])?.parse()?;
        pos += digits;
    }
    let [width, height, maxval] = fields;
    ensure!(
        data.get(pos).is_some_and(u8::is_ascii_whitespace),
        "PPM header: no whitespace after the largest sample value"
    );
    pos += 1;
    ensure!(width > 0 && height > 0, "PPM of {width}x{height} pixels");
    ensure!(
        (1..=255).contains(&maxval),
        "PPM with samples up to {maxval}: want one byte a sample"
    );
    let len = width * height * 3;
    let pixels = &data[pos..];
    ensure!(
        pixels.len() as u64 == len,
        "PPM of {width}x{height} pixels has {} bytes of pixels, not {len}",
        pixels.len()
    );
    Ok(Image {
        width: u32::try_from(width)?,
        height: u32::try_from(height)?,
        rgb: pixels.to_vec(),
    })
}

/// How long QEMU may take to answer over QMP.
const QMP_TIMEOUT: Duration = Duration::from_secs(30);

/// What the QEMU of the QMP socket `qmp_sock` shows on its display: QMP
/// `screendump` into the file `out` (PPM; a path QEMU can write, made
/// absolute here), parsed. A QEMU with one display; else see
/// [`screendump_device`].
pub fn screendump(qmp_sock: &Path, out: &Path) -> anyhow::Result<Image> {
    screendump_device(qmp_sock, None, out)
}

/// [`screendump`] of the display device with QEMU id `device` (e.g. a
/// `[[host.gpu]]`'s id), for a QEMU with more than one.
pub fn screendump_device(
    qmp_sock: &Path,
    device: Option<&str>,
    out: &Path,
) -> anyhow::Result<Image> {
    let out = std::path::absolute(out)?;
    let mut args = serde_json::json!({
        "filename": out.to_str().context("screendump file name is not UTF-8")?,
        "format": "ppm",
    });
    if let Some(d) = device {
        args["device"] = d.into();
    }
    let mut q = devlend::qmp::Qmp::connect(qmp_sock, QMP_TIMEOUT)
        .with_context(|| format!("QMP {}", qmp_sock.display()))?;
    q.execute("screendump", Some(args), QMP_TIMEOUT)
        .with_context(|| format!("QMP screendump on {}", qmp_sock.display()))?;
    let data = std::fs::read(&out).with_context(|| format!("{}", out.display()))?;
    parse_ppm(&data).with_context(|| format!("screendump {}", out.display()))
}

/// The colours (red, green, blue) of the bands [`draw_script`] draws, top
/// to bottom: each differs from the others in every channel it has and
/// none is black (what an unused framebuffer holds), so a band that is
/// missing, moved, or has its channels swapped does not match.
pub const BANDS: [[u8; 3]; 6] = [
    [0xff, 0x00, 0x00],
    [0x00, 0xff, 0x00],
    [0x00, 0x00, 0xff],
    [0xff, 0xff, 0xff],
    [0x12, 0x34, 0x56],
    [0xc0, 0x80, 0x40],
];

/// Rows of each band.
pub const BAND_ROWS: u32 = 16;

/// The rows the pattern covers from the top: `BANDS.len() * BAND_ROWS`.
pub const PATTERN_ROWS: u32 = BANDS.len() as u32 * BAND_ROWS;

/// How long [`draw_script`] waits for `/dev/fb0`.
const FB_WAIT_SECS: u32 = 30;

fn hex(c: [u8; 3]) -> String {
    format!("{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

fn band_list() -> String {
    BANDS.iter().map(|&c| hex(c)).collect::<Vec<_>>().join(" ")
}

/// The guest's line that says what it drew, `width` pixels wide (a
/// number, or the script's variable).
fn drew_line(width: &str) -> String {
    format!(
        "devlend-fb: drew {} bands of {BAND_ROWS} rows, {width} pixels wide: {}",
        BANDS.len(),
        band_list()
    )
}

/// What [`draw_script`] prints once its `drew` line is out whole: wait for
/// this, not for that line's start, which a console read may cut short
/// (a guest's serial port is slow under TCG).
pub const DRAWN: &str = "devlend-fb: holding for";

/// Guest kernel parameters for a guest that draws with [`draw_script`]:
/// the text console stays off the framebuffer (fbcon maps every console to
/// framebuffer 9, which does not exist). Drawn on a lent display, every
/// access to its memory is a message to the lender, and fbcon's clearing
/// and redrawing of the screen took minutes under TCG; the script unbinds
/// fbcon before it draws anyway.
pub const GUEST_KERNEL_ARGS: &str = "fbcon=map:9";

/// A guest script (busybox `sh`) that waits for `/dev/fb0`, prints its
/// geometry (`devlend-fb: geometry <w>x<h> bpp=<n> stride=<bytes>
/// name=<driver's name>`, from `/sys/class/graphics/fb0`), takes fbcon off
/// the framebuffer (its cursor would blink over the top left corner), sets
/// its mode (with fbcon kept off it, [`GUEST_KERNEL_ARGS`], nothing else
/// does),
/// writes [`BANDS`] of [`BAND_ROWS`] full rows each from the top into
/// `/dev/fb0` (32 bits a pixel, XRGB8888: bytes blue, green, red, 0),
/// reads them back, prints `devlend-fb: drew ...` and then keeps the guest
/// up for `hold_secs`, for the picture to be taken from outside. The
/// framebuffer of a DRM driver is a shadow its helper copies into the
/// device's memory after a write, so the script waits a second before it
/// says it drew.
pub fn draw_script(hold_secs: u32) -> String {
    let mut pixels = String::new();
    for [r, g, b] in BANDS {
        let _ = write!(pixels, " '\\{b:03o}\\{g:03o}\\{r:03o}\\000'");
    }
    format!(
        r#"(
fb=/sys/class/graphics/fb0
i=0
while [ ! -c /dev/fb0 ] || [ ! -r $fb/stride ]; do
	if [ $i -ge {wait_ticks} ]; then
		echo "devlend-fb: no /dev/fb0 after {FB_WAIT_SECS} s; graphics: $(ls /sys/class/graphics 2>&1); drm: $(ls /sys/class/drm 2>&1)"
		exit 1
	fi
	sleep 0.1
	i=$((i + 1))
done
size=$(cat $fb/virtual_size)
w=${{size%,*}} h=${{size#*,}}
bpp=$(cat $fb/bits_per_pixel) stride=$(cat $fb/stride)
echo "devlend-fb: geometry ${{w}}x$h bpp=$bpp stride=$stride name=$(cat $fb/name | tr ' ' _)"
[ "$bpp" = 32 ] || {{ echo "devlend-fb: cannot draw at $bpp bits a pixel"; exit 1; }}
[ "$h" -ge {PATTERN_ROWS} ] || {{ echo "devlend-fb: $h rows, fewer than {PATTERN_ROWS}"; exit 1; }}
echo 0 >/sys/class/graphics/fbcon/cursor_blink 2>/dev/null
# Without fbcon on it, nothing set the framebuffer's mode: setting its
# depth again does (fb_set_par), and the display shows the framebuffer.
cat $fb/bits_per_pixel >$fb/bits_per_pixel || {{ echo "devlend-fb: setting the mode failed"; exit 1; }}
for v in /sys/class/vtconsole/vtcon*; do
	case "$(cat $v/name)" in *"frame buffer"*) echo 0 >$v/bind ;; esac
done
n=$((stride * {BAND_ROWS}))
: >/tmp/fb.pat
for px in{pixels}; do
	printf "$px" >/tmp/fb.band
	while [ $(wc -c </tmp/fb.band) -lt $n ]; do
		cat /tmp/fb.band /tmp/fb.band >/tmp/fb.2 && mv /tmp/fb.2 /tmp/fb.band
	done
	head -c $n /tmp/fb.band >>/tmp/fb.pat
done
cat /tmp/fb.pat >/dev/fb0 || {{ echo "devlend-fb: writing /dev/fb0 failed"; exit 1; }}
head -c $(wc -c </tmp/fb.pat) /dev/fb0 | cmp -s - /tmp/fb.pat && rb=same || rb=different
echo "devlend-fb: read back from /dev/fb0: $rb"
sleep 1
echo "{drew}"
echo "{DRAWN} {hold_secs} s"
sleep {hold_secs}
)
"#,
        wait_ticks = FB_WAIT_SECS * 10,
        drew = drew_line("${w}"),
    )
}

/// The framebuffer as the guest saw it (from [`draw_script`]'s output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FbGeometry {
    /// Pixels per row.
    pub width: u32,
    /// Rows (of the virtual screen).
    pub height: u32,
    /// Bits a pixel.
    pub bpp: u32,
    /// Bytes from one row to the next.
    pub stride: u32,
    /// The framebuffer's name (its driver's), spaces as `_`.
    pub name: String,
}

/// What [`draw_script`] printed: its geometry; an error unless it says it
/// drew the bands, read them back the same, across the whole width.
pub fn parse_draw_output(output: &str) -> anyhow::Result<FbGeometry> {
    let line = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("devlend-fb: geometry "))
        .with_context(|| format!("the guest printed no framebuffer geometry:\n{output}"))?;
    let mut f = line.split_whitespace();
    let (w, h) = f
        .next()
        .and_then(|s| s.split_once('x'))
        .with_context(|| format!("bad geometry line {line:?}"))?;
    let mut field = |key: &str| -> anyhow::Result<String> {
        f.next()
            .and_then(|s| s.strip_prefix(key))
            .and_then(|s| s.strip_prefix('='))
            .map(str::to_owned)
            .with_context(|| format!("no {key} in geometry line {line:?}"))
    };
    let geometry = FbGeometry {
        width: w.parse()?,
        height: h.parse()?,
        bpp: field("bpp")?.parse()?,
        stride: field("stride")?.parse()?,
        name: field("name")?,
    };
    ensure!(
        output.contains("devlend-fb: read back from /dev/fb0: same"),
        "the guest did not read its pattern back from /dev/fb0:\n{output}"
    );
    let drew = drew_line(&geometry.width.to_string());
    ensure!(
        output.lines().any(|l| l.trim() == drew),
        "the guest did not say {drew:?}:\n{output}"
    );
    Ok(geometry)
}

/// Checks that `img` (what the device shows, from outside) holds the
/// pattern [`draw_script`] drew on a framebuffer of geometry `fb`: the
/// same width, and every pixel of the first [`PATTERN_ROWS`] rows the
/// colour of its band. The summary counts the matching pixels per band;
/// an error says which do not match.
pub fn check_pattern(img: &Image, fb: &FbGeometry) -> anyhow::Result<String> {
    ensure!(
        img.width == fb.width,
        "the picture is {}x{} pixels, the guest's framebuffer {}x{}: not the guest's mode",
        img.width,
        img.height,
        fb.width,
        fb.height
    );
    ensure!(
        img.height >= PATTERN_ROWS,
        "the picture has {} rows, fewer than the pattern's {PATTERN_ROWS}",
        img.height
    );
    let per_band = u64::from(img.width) * u64::from(BAND_ROWS);
    let mut matched = vec![0u64; BANDS.len()];
    let mut wrong: Vec<String> = Vec::new();
    let mut wrong_count = 0u64;
    for y in 0..PATTERN_ROWS {
        let band = (y / BAND_ROWS) as usize;
        for x in 0..img.width {
            let got = img.pixel(x, y);
            if got == BANDS[band] {
                matched[band] += 1;
            } else {
                wrong_count += 1;
                if wrong.len() < 8 {
                    wrong.push(format!(
                        "({x},{y}) is {} not {}",
                        hex(got),
                        hex(BANDS[band])
                    ));
                }
            }
        }
    }
    let counts = matched
        .iter()
        .zip(BANDS)
        .map(|(n, c)| format!("{}: {n}", hex(c)))
        .collect::<Vec<_>>()
        .join(", ");
    let total: u64 = matched.iter().sum();
    let want = per_band * BANDS.len() as u64;
    if wrong_count > 0 {
        bail!(
            "{total} of {want} pixels of the first {PATTERN_ROWS} rows of the {}x{} picture match the \
             guest's bands ({counts}); {wrong_count} do not, e.g. {}",
            img.width,
            img.height,
            wrong.join(", ")
        );
    }
    Ok(format!(
        "all {want} pixels of the first {PATTERN_ROWS} rows of the {}x{} picture are the guest's \
         {} bands ({counts} pixels)",
        img.width,
        img.height,
        BANDS.len()
    ))
}

/// A guest script (busybox `sh`) that reports, for every audio function
/// (PCI class 0x0403) of the guest, its address, ids and driver
/// (`devlend-hda: function <addr> <vendor>:<device> driver <name or
/// none>`), after waiting up to `wait_secs` for a codec to show in
/// `/proc/asound/card*/codec#*` (the HDA driver probes its codecs after its
/// own probe returns), and each codec found (`devlend-hda: codec
/// card0/codec#0 name=<...> vendor=<...>`), then `devlend-hda: codecs <n>`,
/// and how often the kernel said its driver gave up on the CORB and RIRB
/// rings (`devlend-hda: no-dma <n>`): the driver sends codec verbs through
/// rings in guest RAM, which the controller reads and writes by DMA, and
/// falls back to one verb at a time through registers when no answer
/// comes ("switching to single_cmd mode", "No response from codec").
pub fn audio_script(wait_secs: u32) -> String {
    format!(
        r#"(
i=0
while [ $i -lt {ticks} ]; do
	set -- /proc/asound/card*/codec#*
	[ -e "$1" ] && break
	sleep 0.1
	i=$((i + 1))
done
for d in /sys/bus/pci/devices/*; do
	case "$(cat $d/class)" in 0x0403*) ;; *) continue ;; esac
	drv=none
	[ -e $d/driver ] && drv=$(basename "$(readlink $d/driver)")
	echo "devlend-hda: function ${{d##*/}} $(cat $d/vendor):$(cat $d/device) driver $drv"
done
n=0
for c in /proc/asound/card*/codec#*; do
	[ -e "$c" ] || continue
	n=$((n + 1))
	name=$(sed -n 's/^Codec: //p' "$c" | tr ' ' _)
	vendor=$(sed -n 's/^Vendor Id: //p' "$c")
	echo "devlend-hda: codec ${{c#/proc/asound/}} name=$name vendor=$vendor"
done
echo "devlend-hda: codecs $n"
echo "devlend-hda: no-dma $(dmesg | grep -c -e single_cmd -e 'No response from codec')"
)
"#,
        ticks = wait_secs * 10
    )
}

/// Checks what [`audio_script`] printed: an audio function bound to
/// `snd_hda_intel`, at least one codec found, and found through the
/// controller's DMA rings (the kernel reported no fallback). The summary
/// names them.
pub fn check_audio(output: &str) -> anyhow::Result<String> {
    let functions: Vec<&str> = output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("devlend-hda: function "))
        .collect();
    ensure!(
        !functions.is_empty(),
        "the guest has no audio function (class 0x0403):\n{output}"
    );
    let bound: Vec<&str> = functions
        .iter()
        .copied()
        .filter(|f| f.ends_with(" driver snd_hda_intel"))
        .collect();
    ensure!(
        !bound.is_empty(),
        "no audio function of the guest is bound to snd_hda_intel: {functions:?}"
    );
    let codecs: Vec<&str> = output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("devlend-hda: codec "))
        .collect();
    ensure!(
        !codecs.is_empty(),
        "snd_hda_intel bound ({bound:?}) but found no codec:\n{output}"
    );
    let no_dma = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("devlend-hda: no-dma "))
        .with_context(|| format!("the guest did not say how its codec talked:\n{output}"))?;
    ensure!(
        no_dma.trim() == "0",
        "the HDA controller's DMA rings got no answer; its driver fell back to \
         single commands ({no_dma} kernel messages):\n{output}"
    );
    Ok(format!(
        "snd_hda_intel bound to {}; codecs, through its DMA rings: {}",
        bound
            .iter()
            .map(|f| f.split_whitespace().next().unwrap_or(f))
            .collect::<Vec<_>>()
            .join(", "),
        codecs.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A picture as QEMU's screendump writes it, with the bands drawn over
    /// the first rows of a black screen.
    fn screen(width: u32, height: u32) -> Vec<u8> {
        let mut data = format!("P6\n{width} {height}\n255\n").into_bytes();
        for y in 0..height {
            let c = BANDS
                .get((y / BAND_ROWS) as usize)
                .copied()
                .unwrap_or_default();
            for _ in 0..width {
                data.extend_from_slice(&c);
            }
        }
        data
    }

    fn geometry(width: u32, height: u32) -> FbGeometry {
        FbGeometry {
            width,
            height,
            bpp: 32,
            stride: width * 4,
            name: "bochs-drmdrmfb".into(),
        }
    }

    #[test]
    fn ppm_header_numbers_comments_and_size() {
        let img = parse_ppm(b"P6\n# made by hand\n2 1\n255\n\x01\x02\x03\x04\x05\x06").unwrap();
        assert_eq!((img.width, img.height), (2, 1));
        assert_eq!(img.pixel(1, 0), [4, 5, 6]);
        // Any whitespace between the fields, one byte of it after the last:
        // a pixel may begin with a byte that looks like whitespace.
        let img = parse_ppm(b"P6 1\t1 255 \n\x0b\x0c").unwrap();
        assert_eq!(img.pixel(0, 0), [b'\n', 0x0b, 0x0c]);
        let img = parse_ppm(&screen(640, 480)).unwrap();
        assert_eq!(
            (img.width, img.height, img.rgb.len()),
            (640, 480, 640 * 480 * 3)
        );
        for (bad, why) in [
            (&b"P5\n1 1\n255\n\x00"[..], "not a binary PPM"),
            (
                b"P6\n1 1\n65535\n\x00\x00\x00\x00\x00\x00",
                "one byte a sample",
            ),
            (b"P6\n2 1\n255\n\x00\x00\x00", "not 6"),
            (b"P6\n1 1\n255\n\x00\x00\x00\x00", "not 3"),
            (b"P6\n0 1\n255\n", "0x1"),
            (b"P6\n1 x\n255\n\x00\x00\x00", "field 1"),
            (b"P61 1\n255\n\x00\x00\x00", "separator"),
            (b"P6\n1 1\n255", "no whitespace"),
            (b"P6\n9999999999 1\n255\n", "1 to 9 digits"),
        ] {
            let err = format!("{:#}", parse_ppm(bad).unwrap_err());
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn pattern_found_only_where_every_pixel_matches() {
        let img = parse_ppm(&screen(64, 120)).unwrap();
        let summary = check_pattern(&img, &geometry(64, 120)).unwrap();
        assert!(summary.contains("all 6144 pixels"), "{summary}");
        assert!(summary.contains("ff0000: 1024"), "{summary}");
        // One pixel off, in the last row of the last band.
        let mut off = img.clone();
        let i = ((PATTERN_ROWS as usize - 1) * 64 + 63) * 3;
        off.rgb[i] ^= 1;
        let err = check_pattern(&off, &geometry(64, 120))
            .unwrap_err()
            .to_string();
        assert!(err.contains("6143 of 6144"), "{err}");
        assert!(err.contains("(63,95) is c18040 not c08040"), "{err}");
        // Red and blue swapped (bytes read in the wrong order).
        let mut swapped = img.clone();
        for p in swapped.rgb.chunks_mut(3) {
            p.swap(0, 2);
        }
        let err = check_pattern(&swapped, &geometry(64, 120)).unwrap_err();
        assert!(err.to_string().contains("do not"), "{err}");
        // A black screen, one of another mode, one too short.
        let black = Image {
            width: 64,
            height: 120,
            rgb: vec![0; 64 * 120 * 3],
        };
        let err = check_pattern(&black, &geometry(64, 120)).unwrap_err();
        assert!(err.to_string().contains("0 of 6144"), "{err}");
        let err = check_pattern(&img, &geometry(640, 480)).unwrap_err();
        assert!(err.to_string().contains("not the guest's mode"), "{err}");
        let short = parse_ppm(&screen(64, 90)).unwrap();
        let err = check_pattern(&short, &geometry(64, 90)).unwrap_err();
        assert!(err.to_string().contains("fewer than"), "{err}");
    }

    #[test]
    fn draw_output_parsed_and_checked() {
        let ok = "devlend-fb: geometry 1024x768 bpp=32 stride=4096 name=bochs-drmdrmfb\n\
                  devlend-fb: read back from /dev/fb0: same\n\
                  devlend-fb: drew 6 bands of 16 rows, 1024 pixels wide: \
                  ff0000 00ff00 0000ff ffffff 123456 c08040\n\
                  devlend-fb: holding for 5 s\n";
        let g = parse_draw_output(ok).unwrap();
        assert_eq!(
            g,
            FbGeometry {
                width: 1024,
                height: 768,
                bpp: 32,
                stride: 4096,
                name: "bochs-drmdrmfb".into()
            }
        );
        let err = parse_draw_output(&ok.replace("same", "different")).unwrap_err();
        assert!(err.to_string().contains("read its pattern back"), "{err}");
        let err = parse_draw_output(&ok.replace("1024 pixels", "800 pixels")).unwrap_err();
        assert!(err.to_string().contains("did not say"), "{err}");
        let err = parse_draw_output("devlend-fb: no /dev/fb0 after 30 s").unwrap_err();
        assert!(err.to_string().contains("no framebuffer geometry"), "{err}");
    }

    #[test]
    fn draw_script_writes_each_band_in_the_framebuffers_byte_order() {
        let s = draw_script(7);
        // XRGB8888 in memory: blue, green, red, 0.
        assert!(s.contains(
            "for px in '\\000\\000\\377\\000' '\\000\\377\\000\\000' '\\377\\000\\000\\000' \
             '\\377\\377\\377\\000' '\\126\\064\\022\\000' '\\100\\200\\300\\000'; do"
        ));
        assert!(s.contains(
            "echo \"devlend-fb: drew 6 bands of 16 rows, ${w} pixels wide: \
             ff0000 00ff00 0000ff ffffff 123456 c08040\""
        ));
        assert!(s.contains("sleep 7\n"));
        assert!(s.contains("[ $i -ge 300 ]"));
    }

    #[test]
    fn draw_script_runs_in_sh_and_draws_the_bands() {
        // The script against a fake framebuffer: a file for /dev/fb0 is
        // not a character device, so run only the drawing part, with the
        // geometry set as the script would read it.
        let script = draw_script(0);
        let start = script.find("n=$((stride").unwrap();
        let end = script.find("cat /tmp/fb.pat >/dev/fb0").unwrap();
        let dir = std::env::temp_dir().join(format!("devlend-group-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let body = script[start..end].replace("/tmp/", &format!("{}/", dir.display()));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("stride=32\n{body}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let pat = std::fs::read(dir.join("fb.pat")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        // 8 pixels a row: the same picture as the screen QEMU would show.
        assert_eq!(pat.len(), 32 * PATTERN_ROWS as usize);
        let rgb: Vec<u8> = pat
            .chunks(4)
            .flat_map(|p| {
                assert_eq!(p[3], 0);
                [p[2], p[1], p[0]]
            })
            .collect();
        let img = Image {
            width: 8,
            height: PATTERN_ROWS,
            rgb,
        };
        check_pattern(&img, &geometry(8, PATTERN_ROWS)).unwrap();
    }

    #[test]
    fn audio_checked_for_driver_and_codec() {
        let ok = "devlend-hda: function 0000:01:00.1 0x8086:0x2668 driver snd_hda_intel\n\
                  devlend-hda: codec card0/codec#0 name=Generic vendor=0x1af40022\n\
                  devlend-hda: codecs 1\n\
                  devlend-hda: no-dma 0\n";
        let s = check_audio(ok).unwrap();
        assert_eq!(
            s,
            "snd_hda_intel bound to 0000:01:00.1; codecs, through its DMA rings: \
             card0/codec#0 name=Generic vendor=0x1af40022"
        );
        let err = check_audio(&ok.replace("no-dma 0", "no-dma 2")).unwrap_err();
        assert!(err.to_string().contains("single commands"), "{err}");
        let err = check_audio(&ok.replace("devlend-hda: no-dma 0\n", "")).unwrap_err();
        assert!(err.to_string().contains("how its codec talked"), "{err}");
        let err = check_audio(&ok.replace("driver snd_hda_intel", "driver none")).unwrap_err();
        assert!(err.to_string().contains("bound to snd_hda_intel"), "{err}");
        let no_codec: String = ok
            .lines()
            .filter(|l| !l.contains("codec#"))
            .map(|l| format!("{l}\n"))
            .collect();
        let err = check_audio(&no_codec).unwrap_err();
        assert!(err.to_string().contains("no codec"), "{err}");
        let err = check_audio("devlend-hda: codecs 0\n").unwrap_err();
        assert!(err.to_string().contains("no audio function"), "{err}");
    }

    /// A QEMU this test started, killed (by its PID, as a child of ours)
    /// when the test ends before it exits.
    struct Qemu(std::process::Child);

    impl Drop for Qemu {
        fn drop(&mut self) {
            if self.0.try_wait().ok().flatten().is_none() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }

    /// The check's guest side with no devlend in it: one QEMU under TCG on
    /// this machine with the `[[host.gpu]]` device as the cluster gives it
    /// to a lender (a root port, [`devlend_cluster::qemu::gpu_args`]),
    /// booting the guest images, whose guest reports its audio function
    /// and draws the bands; the same QEMU's screendump, taken while the
    /// guest holds, must show them. Boots a guest under TCG (one to a few
    /// minutes): `cargo test -p devlend-vmtests --lib -- --ignored
    /// --nocapture group::tests::tcg`.
    #[test]
    #[ignore]
    fn tcg_guest_draws_what_screendump_reads_back() {
        use std::time::Instant;
        let images = devlend_cluster::tools::guest_images_dir().unwrap();
        let dir = std::env::temp_dir().join(format!("devlend-group-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (sock, console, ppm) = (
            dir.join("qmp.sock"),
            dir.join("console.log"),
            dir.join("screen.ppm"),
        );
        let cmd = format!("{}{}", audio_script(20), draw_script(30));
        let gpu = devlend_cluster::topology::GpuSpec { id: "gpu0".into() };
        let mut qemu = std::process::Command::new("qemu-system-x86_64");
        qemu.args([
            "-machine", "q35", "-accel", "tcg", "-cpu", "max", "-m", "512",
        ])
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-qmp")
        .arg(format!("unix:{},server=on,wait=off", sock.display()))
        .arg("-kernel")
        .arg(images.join("vmlinuz"))
        .arg("-initrd")
        .arg(images.join("guest-initrd.img"))
        .arg("-append")
        .arg(crate::guest::kernel_cmdline_with(&cmd, GUEST_KERNEL_ARGS).unwrap())
        .args(["-device", "pcie-root-port,id=rp-gpu0,chassis=1,slot=1"])
        .args(devlend_cluster::qemu::gpu_args(&gpu));
        let t0 = Instant::now();
        let mut qemu = Qemu(qemu.spawn().unwrap());
        eprintln!("QEMU pid {}, files in {}", qemu.0.id(), dir.display());
        let read = || std::fs::read_to_string(&console).unwrap_or_default();
        while !read().contains(DRAWN) {
            let exited = qemu.0.try_wait().unwrap();
            assert!(
                exited.is_none() && t0.elapsed() < Duration::from_secs(480),
                "the guest did not draw (QEMU {exited:?} after {:?}); console:\n{}",
                t0.elapsed(),
                read()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        eprintln!("guest drew after {:.1} s", t0.elapsed().as_secs_f64());
        let img = screendump(&sock, &ppm).unwrap();
        while qemu.0.try_wait().unwrap().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(600),
                "the guest did not power off; console:\n{}",
                read()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        let run = crate::guest::parse_console(read(), t0.elapsed()).unwrap();
        eprintln!("guest output:\n{}", run.output);
        assert_eq!(run.rc, 0, "{}", run.output);
        // Every module of the guest's lists loaded.
        assert!(!run.console.contains("warning: insmod"), "{}", run.console);
        let fb = parse_draw_output(&run.output).unwrap();
        eprintln!("framebuffer: {fb:?}");
        eprintln!("audio: {}", check_audio(&run.output).unwrap());
        eprintln!("screendump: {}", check_pattern(&img, &fb).unwrap());
        // Below the bands, the rest of the screen the guest left alone.
        let rest = (PATTERN_ROWS..img.height)
            .flat_map(|y| (0..img.width).map(move |x| (x, y)))
            .filter(|&(x, y)| img.pixel(x, y) == [0, 0, 0])
            .count();
        eprintln!(
            "screendump: {rest} of {} pixels below the bands are black",
            u64::from(img.width) * u64::from(img.height - PATTERN_ROWS)
        );
        drop(qemu);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn both_scripts_fit_the_guests_command_line() {
        let cmd = format!("{}{}", audio_script(20), draw_script(60));
        let line = crate::guest::kernel_cmdline(&cmd).unwrap();
        assert!(line.len() <= crate::guest::KERNEL_CMDLINE_MAX);
    }
}
