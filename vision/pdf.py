"""PDF pages as images (optional: needs ``pypdfium2``)."""

from __future__ import annotations

import io

from vision.errors import MediaTooLarge, UndecodableMedia, UnsupportedMedia

PDF_MAGIC = b"%PDF"


def is_pdf(data: bytes) -> bool:
    return data[:1024].lstrip().startswith(PDF_MAGIC)


def render_pdf(data: bytes, dpi: int = 144, max_pages: int = 256) -> list[bytes]:
    """Render every page of a PDF to PNG bytes at ``dpi`` (72 dpi = scale 1)."""
    try:
        import pypdfium2 as pdfium
    except ImportError:
        raise UnsupportedMedia(
            "PDF input needs the optional pypdfium2 package: pip install pypdfium2"
        ) from None
    try:
        document = pdfium.PdfDocument(data)
    except Exception as e:  # noqa: BLE001 - pdfium raises its own error types
        raise UndecodableMedia(f"the PDF cannot be read: {e}") from None
    if len(document) > max_pages:
        raise MediaTooLarge(f"the PDF has {len(document)} pages; at most {max_pages} are allowed")
    pages = []
    for page in document:
        image = page.render(scale=dpi / 72).to_pil().convert("RGB")
        buf = io.BytesIO()
        image.save(buf, "PNG")
        pages.append(buf.getvalue())
    if not pages:
        raise UndecodableMedia("the PDF has no pages")
    return pages
