//! A bitmap backend whose text is drawn with `ab_glyph` from a font file read at run time.
//! plotters' own bitmap text needs either system font discovery (`ttf`: font-kit and
//! fontconfig) or a `&'static` font registered globally (`ab_glyph`), which would also make
//! the SVG output fail on machines without the font. Wrapping the backend keeps SVG
//! font-free and lets a missing font cost only the PNGs.

use ab_glyph::{point, Font, FontVec, PxScale, ScaleFont};
use plotters::backend::BitMapBackend;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

/// An RGB [`BitMapBackend`] plus the font its text is drawn with.
pub struct GlyphBitmap<'a> {
    pub inner: BitMapBackend<'a>,
    pub font: &'a FontVec,
}

type Error<'a> = DrawingErrorKind<<BitMapBackend<'a> as DrawingBackend>::ErrorType>;

impl GlyphBitmap<'_> {
    /// plotters' SVG writes `font-size = size / 1.24`; the same pixel height here keeps the
    /// two outputs alike.
    fn scale(size: f64) -> PxScale {
        PxScale::from((size / 1.24) as f32)
    }

    /// Width and height of `text` on one line.
    fn measure(&self, text: &str, size: f64) -> (f32, f32) {
        let font = self.font.as_scaled(Self::scale(size));
        let mut width = 0.0;
        let mut prev = None;
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                width += font.kern(p, id);
            }
            width += font.h_advance(id);
            prev = Some(id);
        }
        (width, font.ascent() - font.descent())
    }
}

impl<'a> DrawingBackend for GlyphBitmap<'a> {
    type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), Error<'a>> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), Error<'a>> {
        self.inner.present()
    }
    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), Error<'a>> {
        self.inner.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), Error<'a>> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        ul: BackendCoord,
        br: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), Error<'a>> {
        self.inner.draw_rect(ul, br, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), Error<'a>> {
        self.inner.draw_path(path, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), Error<'a>> {
        self.inner.draw_circle(center, radius, style, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), Error<'a>> {
        self.inner.fill_polygon(vert, style)
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), Error<'a>> {
        let (w, h) = self.measure(text, style.size());
        Ok((w.ceil() as u32, h.ceil() as u32))
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), Error<'a>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let scale = Self::scale(style.size());
        let (width, height) = self.measure(text, style.size());
        // Anchor offsets, as plotters' default `draw_text` computes them.
        let dx = match style.anchor().h_pos {
            HPos::Left => 0.0,
            HPos::Center => -width / 2.0,
            HPos::Right => -width,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0.0,
            VPos::Center => -height / 2.0,
            VPos::Bottom => -height,
        };
        let transform = style.transform();
        let font = self.font.as_scaled(scale);
        // Rasterise first: the coverage callback cannot return the backend's errors.
        let mut pixels: Vec<(BackendCoord, f32)> = Vec::new();
        let (mut caret, mut prev) = (0.0f32, None);
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                caret += font.kern(p, id);
            }
            prev = Some(id);
            let glyph = id.with_scale_and_position(scale, point(caret + dx, font.ascent() + dy));
            caret += font.h_advance(id);
            if let Some(outline) = self.font.outline_glyph(glyph) {
                let bounds = outline.px_bounds();
                outline.draw(|gx, gy, coverage| {
                    let (x, y) = transform.transform(
                        bounds.min.x as i32 + gx as i32,
                        bounds.min.y as i32 + gy as i32,
                    );
                    pixels.push(((pos.0 + x, pos.1 + y), coverage));
                });
            }
        }
        for (point, coverage) in pixels {
            if coverage > 0.0 {
                let alpha = color.alpha * f64::from(coverage.min(1.0));
                self.inner.draw_pixel(point, BackendColor { alpha, rgb: color.rgb })?;
            }
        }
        Ok(())
    }
}
