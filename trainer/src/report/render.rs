//! Writing a [`Chart`] to files: SVG always, PNG when a font for its text is found.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};

use super::charts::Chart;
use super::{draw, glyph_bitmap};

/// Where to look for a font when `--font` is not given: DejaVu and Liberation on Linux
/// (`apt-get install fonts-dejavu-core`), Arial on macOS and Windows.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// The font for PNG text: `explicit` (an error if it cannot be read), else the first usable
/// candidate, else `None`.
pub fn find_font(explicit: Option<&Path>) -> Result<Option<(PathBuf, ab_glyph::FontVec)>> {
    let load = |path: &Path| -> Result<ab_glyph::FontVec> {
        let bytes =
            std::fs::read(path).with_context(|| format!("reading font {}", path.display()))?;
        ab_glyph::FontVec::try_from_vec(bytes)
            .map_err(|e| anyhow!("{}: not a TrueType/OpenType font ({e})", path.display()))
    };
    if let Some(path) = explicit {
        return Ok(Some((path.to_path_buf(), load(path)?)));
    }
    Ok(FONT_CANDIDATES
        .iter()
        .map(Path::new)
        .find_map(|p| load(p).ok().map(|f| (p.to_path_buf(), f))))
}

/// Writes `chart` as `<stem>.svg`, and as `<stem>.png` when `font` is given.
pub fn render_chart(
    chart: &Chart,
    dir: &Path,
    stem: &str,
    font: Option<&ab_glyph::FontVec>,
) -> Result<Vec<PathBuf>> {
    use plotters::prelude::{IntoDrawingArea, SVGBackend};
    let mut written = Vec::new();
    let size = draw::chart_size(chart);
    let svg = dir.join(format!("{stem}.svg"));
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        draw::draw_chart(chart, &root).map_err(|e| anyhow!("drawing {}: {e}", svg.display()))?;
        root.present().map_err(|e| anyhow!("writing {}: {e}", svg.display()))?;
    }
    written.push(svg);
    if let Some(font) = font {
        let png = dir.join(format!("{stem}.png"));
        let (w, h) = size;
        let mut rgb = vec![255u8; (w * h * 3) as usize];
        {
            let backend = glyph_bitmap::GlyphBitmap {
                inner: plotters::backend::BitMapBackend::with_buffer(&mut rgb, size),
                font,
            };
            let root = backend.into_drawing_area();
            draw::draw_chart(chart, &root)
                .map_err(|e| anyhow!("drawing {}: {e}", png.display()))?;
            root.present().map_err(|e| anyhow!("drawing {}: {e}", png.display()))?;
        }
        write_png(&png, &rgb, size)?;
        written.push(png);
    }
    Ok(written)
}

fn write_png(path: &Path, rgb: &[u8], (w, h): (u32, u32)) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer =
        encoder.write_header().with_context(|| format!("writing {}", path.display()))?;
    writer.write_image_data(rgb).with_context(|| format!("writing {}", path.display()))?;
    writer.finish().with_context(|| format!("writing {}", path.display()))
}
