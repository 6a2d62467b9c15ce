"""A catalogue of hostile inputs, one per class, generated in code from a seed (nothing downloaded).

Each `HostileInput` names the quarantine code it must end with and a reason fragment that the
person reading the quarantine needs (which bound, which encoding, which key). The catalogue is
shared by `test_bad_inputs.py` (straight through the DocumentReader sandbox) and the chaos
scenario `hostile_inputs` (through the real pipeline, where the original bytes must be kept).

Sizes are real: the 19 MB text node is 19 MB. The bombs are small files that are expensive to
read; they end `too_complex` under any limits a deployment would choose (the tests use tight
ones, so each costs seconds, not minutes).
"""

from __future__ import annotations

import gzip
import io
import json
import random
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import pypdf
from pypdf.generic import ArrayObject, ByteStringObject

from invoice_pipeline.documents import DEFAULT_MAX_BYTES, MAX_PDF_PAGES
from invoice_pipeline.samples.render import letter_pdf

UBL_NS = (
    'xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" '
    'xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2" '
    'xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"'
)
# The terminal attacks a hostile file name or text carries: clear the screen, write the
# clipboard (OSC 52), then display right-to-left.
TERMINAL_ATTACK = "\x1b[2J\x1b]52;c;ZWNobyBwd25lZA==\x07\u202eevil"


@dataclass(frozen=True)
class HostileInput:
    name: str
    content: bytes
    code: str
    # Something the reason must say, so a person can act on it (case-insensitive).
    says: str
    filename: str


def ubl(invoice_id: str = "H-1", *, payable: str = "119.00", extra: str = "") -> str:
    return (
        f"<Invoice {UBL_NS}><cbc:ID>{invoice_id}</cbc:ID><cbc:IssueDate>2024-03-01</cbc:IssueDate>"
        "<cbc:DocumentCurrencyCode>EUR</cbc:DocumentCurrencyCode>"
        "<cac:AccountingSupplierParty><cac:Party><cac:PartyName><cbc:Name>Hostile GmbH</cbc:Name>"
        "</cac:PartyName></cac:Party></cac:AccountingSupplierParty>"
        f'{extra}<cac:LegalMonetaryTotal><cbc:PayableAmount currencyID="EUR">{payable}</cbc:PayableAmount>'
        "</cac:LegalMonetaryTotal></Invoice>"
    )


def invoice_json(**overrides: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "invoice_number": "H-1",
        "issue_date": "2024-03-01",
        "currency": "EUR",
        "payable_total": "119.00",
        "seller_name": "Hostile GmbH",
    }
    doc.update(overrides)
    return doc


# -- a minimal PDF writer: the hostile structures pypdf and fpdf refuse to write -------------------


def raw_pdf(objects: list[bytes], *, root: int = 1, trailer_extra: bytes = b"") -> bytes:
    """Objects numbered from 1, a correct xref table and trailer."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        root,
        trailer_extra,
        xref,
    )
    return bytes(out)


def stream(data: bytes, *, extra: bytes = b"", compress: bool = True) -> bytes:
    if compress:
        data = zlib.compress(data, 9)
        extra += b" /Filter /FlateDecode"
    return b"<< /Length %d %s >>\nstream\n" % (len(data), extra) + data + b"\nendstream"


FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def one_page_pdf(
    content: bytes,
    *,
    media: bytes = b"[0 0 612 792]",
    catalog_extra: bytes = b"",
    page_extra: bytes = b"",
    more: list[bytes] | None = None,
    resources: bytes = b"/Font << /F1 5 0 R >>",
    font: bytes = FONT,
) -> bytes:
    """Catalog 1, pages 2, page 3, contents 4, font 5, then `more` as objects 6, 7, ..."""
    return raw_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R " + catalog_extra + b">>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox "
            + media
            + b" /Resources << "
            + resources
            + b" >> /Contents 4 0 R "
            + page_extra
            + b">>",
            stream(content),
            font,
            *(more or []),
        ]
    )


def text_ops(lines: Sequence[tuple[object, float, str]]) -> bytes:
    """Content drawing each (x, y, text) in 10-pt Helvetica; x may be any PDF number literal."""
    ops = []
    for x, y, text in lines:
        literal = text.encode("latin-1").replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
        ops.append(b"BT /F1 10 Tf %s %s Td (%s) Tj ET" % (str(x).encode(), str(y).encode(), literal))
    return b"\n".join(ops)


LETTER = [
    (72, 700, "Dear Sir or Madam,"),
    (72, 680, "please find our new brochure enclosed."),
    (72, 660, "Kind regards"),
]


def _with_writer(base: bytes, edit: Callable[[pypdf.PdfWriter], None]) -> bytes:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(base)))
    edit(writer)
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def _encrypt(writer: pypdf.PdfWriter) -> None:
    """RC4-128 under a fixed file identifier: AES draws a random IV per string and pypdf a random
    identifier, either of which would make the bytes differ from run to run."""
    file_id = ByteStringObject(b"hostile-corpus-1")
    writer._ID = ArrayObject([file_id, file_id])
    writer.generate_file_identifiers = lambda: None  # type: ignore[method-assign]
    writer.encrypt(user_password="pw", owner_password="o", algorithm="RC4-128")


# -- the catalogue --------------------------------------------------------------------------------


@lru_cache(maxsize=2)
def build(seed: int = 0) -> tuple[HostileInput, ...]:
    """Every class, deterministic for a seed (the seed varies the filler bytes, not the classes).

    Cached: several test modules of one session share the ~200 MB it takes to build.
    """
    rng = random.Random(seed)
    noise = bytes(rng.randrange(256) for _ in range(4096))
    items: list[HostileInput] = []

    def add(name: str, content: bytes, code: str, says: str, filename: str | None = None) -> None:
        items.append(HostileInput(name, content, code, says, filename or f"{name}.bin"))

    letter = letter_pdf([text for _, _, text in LETTER])
    invoice_pdf = letter_pdf(["ACME GmbH", "Invoice No: H-77", "Amount due: 119.00 EUR"])

    # Not a document at all.
    add("empty_file", b"", "empty_file", "re-send")
    add("whitespace_only", b" \r\n\t " * 100, "empty_file", "whitespace")
    add(
        "over_size_limit",
        b"{" + b" " * DEFAULT_MAX_BYTES + b"}",
        "too_large",
        f"{DEFAULT_MAX_BYTES}-byte limit",
    )
    # A PNG signature is a scan to OCR; what follows it here is no image.
    add("png_image", b"\x89PNG\r\n\x1a\n" + noise, "unreadable_document", "could not be decoded")
    add("elf_executable", b"\x7fELF\x02\x01\x01" + noise, "unsupported_format", "neither PDF")
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        # A fixed timestamp: the same seed gives the same bytes.
        member = zipfile.ZipInfo("invoice.pdf", (2024, 1, 1, 0, 0, 0))
        member.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(member, b"\0" * (20 * 1024 * 1024))
    add("zip_bomb_named_pdf", bomb.getvalue(), "unsupported_format", "ZIP archive", "invoice.pdf")
    add(
        "gzip_bomb",
        gzip.compress(b"\0" * (20 * 1024 * 1024), mtime=0),
        "unsupported_format",
        "neither PDF",
        "invoice.xml.gz",
    )
    add(
        "pdf_header_too_late",
        noise[:1100].replace(b"%PDF", b"%XDF") + letter,
        "unsupported_format",
        "neither PDF",
    )
    add(
        "xhtml_page",
        b'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>Invoice 1</p></body></html>',
        "unsupported_xml",
        "not a UBL",
    )

    # PDF structure.
    add("pdf_truncated", invoice_pdf[: len(invoice_pdf) // 2], "corrupt_pdf", "truncated")
    add("pdf_garbage_body", b"%PDF-1.4\n" + noise + b"\n%%EOF\n", "corrupt_pdf", "re-export")
    broken_xref = letter.replace(b" obj", b" ojb").replace(b"xref", b"xerf")
    add("pdf_broken_xref", broken_xref, "corrupt_pdf", "damaged")
    add(
        "pdf_page_tree_cycle",
        raw_pdf(
            [
                b"<< /Type /Catalog /Pages 2 0 R >>",
                b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
                b"<< /Type /Pages /Kids [2 0 R] /Count 1 /Parent 2 0 R >>",
            ]
        ),
        "corrupt_pdf",
        "damaged",
    )
    nested = b"[" * 20_000 + b"]" * 20_000
    add(
        "pdf_deeply_nested_objects",
        one_page_pdf(text_ops(LETTER), catalog_extra=b"/Nested 6 0 R ", more=[nested]),
        "too_complex",
        "nested too deeply",
    )
    add("pdf_encrypted", _with_writer(letter, _encrypt), "encrypted_pdf", "password")
    add("pdf_cover_letter", letter, "not_an_invoice", "check that this is an invoice")

    # PDF amplification: small files that are expensive to read.
    far = [(350_000_000, 700, "Payment reference"), *LETTER]
    add("pdf_text_far_right", one_page_pdf(text_ops(far)), "not_an_invoice", "check that this is an invoice")
    far_digits = [("9" * 400, 700, "far beyond any page"), *LETTER]
    add("pdf_text_at_400_digit_x", one_page_pdf(text_ops(far_digits)), "not_an_invoice", "invoice")
    add(
        "pdf_huge_page",
        one_page_pdf(text_ops([(5e8, 700, "wide"), *LETTER]), media=b"[0 0 1000000000 1000000000]"),
        "not_an_invoice",
        "invoice",
    )
    # 2 million glyphs behind a ~10 kB compressed stream (the 15 kB file of issue 11 took 15 s).
    flood = b"BT /F1 1 Tf 0 700 Td " + (b"(" + b"W" * 1000 + b") Tj ") * 2000 + b"ET"
    add("pdf_decompression_bomb", one_page_pdf(flood), "too_complex", "limit")
    # Forms drawing forms: level k draws level k-1 ten times, so 10**7 glyphs from 8 objects.
    forms = [
        stream(
            b"BT /F1 1 Tf 0 0 Td (X) Tj ET",
            extra=b"/Type /XObject /Subtype /Form /BBox [0 0 10 10] /Resources << /Font << /F1 5 0 R >> >>",
        )
    ]
    for level in range(1, 8):
        body = b" ".join(b"/X%d Do" % (level - 1) for _ in range(10))
        forms.append(
            stream(
                body,
                extra=b"/Type /XObject /Subtype /Form /BBox [0 0 10 10] /Resources << /XObject << /X%d %d 0 R >> >>"
                % (level - 1, 6 + level - 1),
            )
        )
    add(
        "pdf_form_xobject_bomb",
        one_page_pdf(b"/X7 Do", resources=b"/XObject << /X7 13 0 R >>", more=forms),
        "too_complex",
        "limit",
    )
    pages = MAX_PDF_PAGES + 100
    page_objects = [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>" for _ in range(pages)]
    kids = b" ".join(b"%d 0 R" % (3 + i) for i in range(pages))
    add(
        "pdf_too_many_pages",
        raw_pdf(
            [
                b"<< /Type /Catalog /Pages 2 0 R >>",
                b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
                *page_objects,
            ]
        ),
        "too_complex",
        f"{pages:,} pages",
    )

    # PDF active content and attachments.
    add(
        "pdf_javascript_open_action",
        one_page_pdf(
            text_ops(LETTER), catalog_extra=b"/OpenAction << /S /JavaScript /JS (app.alert\\('hi'\\)) >> "
        ),
        "active_content",
        "JavaScript",
    )
    add(
        "pdf_javascript_name_tree",
        one_page_pdf(
            text_ops(LETTER),
            catalog_extra=b"/Names << /JavaScript << /Names [(a) 6 0 R] >> >> ",
            more=[b"<< /S /JavaScript /JS (this.print\\(\\)) >>"],
        ),
        "active_content",
        "JavaScript",
    )
    add(
        "pdf_javascript_hex_escaped_name",
        one_page_pdf(text_ops(LETTER), page_extra=b"/AA << /O << /S /J#61vaScript /J#53 (1) >> >> "),
        "active_content",
        "JavaScript",
    )
    add(
        "pdf_launch_action",
        one_page_pdf(text_ops(LETTER), catalog_extra=b"/OpenAction << /S /Launch /F (calc.exe) >> "),
        "active_content",
        "Launch",
    )

    def attach(name: str, data: bytes) -> Callable[[pypdf.PdfWriter], None]:
        def add_to(w: pypdf.PdfWriter) -> None:
            w.add_attachment(name, data)

        return add_to

    # pypdf writes attachments uncompressed; a bomb needs its stream written by hand.
    attached_bomb = b"<a>" + b" " * (DEFAULT_MAX_BYTES + 1024 * 1024) + b"</a>"
    add(
        "pdf_attached_xml_bomb",
        one_page_pdf(
            text_ops(LETTER),
            catalog_extra=b"/Names << /EmbeddedFiles << /Names [(factur-x.xml) 6 0 R] >> >> ",
            more=[
                b"<< /Type /Filespec /F (factur-x.xml) /UF (factur-x.xml) /EF << /F 7 0 R >> >>",
                stream(attached_bomb, extra=b"/Type /EmbeddedFile"),
            ],
        ),
        "too_complex",
        "decompresses to more than",
    )
    xxe = f'<?xml version="1.0"?><!DOCTYPE Invoice [<!ENTITY x SYSTEM "file:///etc/passwd">]>{ubl("&x;")}'
    add(
        "pdf_attached_xxe",
        _with_writer(letter, attach("factur-x.xml", xxe.encode())),
        "xml_entities_forbidden",
        "entities",
    )
    # A PDF inside a PDF is an attachment like any other: only the invoice XML is ever opened.
    add(
        "pdf_nested_pdf_attachment",
        _with_writer(letter, attach("invoice.pdf", invoice_pdf)),
        "not_an_invoice",
        "invoice",
    )
    add(
        "pdf_attached_executable",
        _with_writer(letter, attach("setup.exe", b"MZ" + noise)),
        "not_an_invoice",
        "invoice",
    )
    # A ToUnicode map can make any glyph "mean" NUL, ESC or half a surrogate pair: the text layer
    # then carries characters PostgreSQL cannot store.
    to_unicode = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /H def /CMapType 2 def "
        b"1 begincodespacerange <00> <FF> endcodespacerange "
        b"3 beginbfchar <7E> <0000> <5E> <D800> <60> <001B> endbfchar endcmap "
        b"CMapName currentdict /CMap defineresource pop end end"
    )
    add(
        "pdf_nul_bytes_in_text",
        one_page_pdf(
            text_ops([(72, 700, "Dear~Sir^or`Madam,"), (72, 680, "see the~enclosed brochure.")]),
            font=b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
            more=[stream(to_unicode)],
        ),
        "not_an_invoice",
        "invoice",
    )
    add(
        "pdf_terminal_escapes_in_text",
        one_page_pdf(text_ops([(72, 700, "\x1b[2J\x1b]52;c;cHduZWQ=\x07 hello"), *LETTER])),
        "not_an_invoice",
        "invoice",
        filename=f"{TERMINAL_ATTACK}.pdf",
    )

    # XML.
    lol = ['<!ENTITY lol0 "lol">'] + [f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)]
    add(
        "xml_billion_laughs",
        f'<?xml version="1.0"?><!DOCTYPE Invoice [{"".join(lol)}]>{ubl("&lol9;")}'.encode(),
        "xml_entities_forbidden",
        "entities",
    )
    add("xml_xxe_file", xxe.encode(), "xml_entities_forbidden", "XXE")
    add(
        "xml_parameter_entity_utf16",
        f'<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE Invoice [<!ENTITY % p SYSTEM "http://127.0.0.1:9/x"> %p;]>{ubl()}'.encode(
            "utf-16"
        ),
        "xml_entities_forbidden",
        "entities",
    )
    add("xml_19mb_text_node", ubl("H-" + "A" * (19 * 1000 * 1000)).encode(), "too_complex", "safety limit")
    add(
        "xml_15mb_attribute",
        ubl(extra=f'<cbc:Note x="{"B" * (15 * 1000 * 1000)}">n</cbc:Note>').encode(),
        "too_complex",
        "safety limit",
    )
    add(
        "xml_deep_nesting",
        ubl(extra="<cbc:Note>" * 5000 + "</cbc:Note>" * 5000).encode(),
        "too_complex",
        "safety limit",
    )
    # Millions of elements: ~600 MB of libxml2 nodes from a file under the size limit.
    # (Over the memory bound or, if that is generous, over the element limit: too_complex either way.)
    add("xml_element_flood", ubl(extra="<a/>" * 5_000_000).encode(), "too_complex", "limit")
    add(
        "xml_utf16le_without_bom",
        ubl().encode("utf-16-le"),
        "bad_encoding",
        "UTF-16LE without a byte-order mark",
    )
    add(
        "xml_utf16be_without_bom",
        ubl().encode("utf-16-be"),
        "bad_encoding",
        "UTF-16BE without a byte-order mark",
    )
    add("xml_nul_bytes", ubl("H\x00-1").encode(), "bad_encoding", "encoding")
    add("xml_escape_char_reference", ubl("H&#x1b;[2J").encode(), "malformed_xml", "not well-formed")
    add(
        "xml_wrong_root",
        b'<?xml version="1.0"?><Order xmlns="urn:x"><ID>1</ID></Order>',
        "unsupported_xml",
        "root element",
    )
    add("xml_truncated", ubl().encode()[:-40], "malformed_xml", "not well-formed")
    add("xml_amount_5000_digits", ubl(payable="9" * 5000).encode(), "amount_out_of_range", "out of range")
    add(
        "xml_amount_huge_exponent",
        ubl(payable="1E+999999999").encode(),
        "amount_out_of_range",
        "out of range",
    )

    # JSON.
    add(
        "json_integer_5000_digits",
        b'{"invoice_number": "H-1", "payable_total": ' + b"9" * 5000 + b"}",
        "json_number_too_long",
        "4,300 digits",
    )
    add(
        "json_decimal_5000_digits",
        b'{"invoice_number": "H-1", "payable_total": ' + b"9" * 5000 + b".5}",
        "amount_out_of_range",
        "out of range",
    )
    add(
        "json_huge_exponent",
        b'{"invoice_number": "H-1", "payable_total": 1e999999999}',
        "amount_out_of_range",
        "out of range",
    )
    add(
        "json_duplicate_key",
        b'{"invoice_number": "H-1", "currency": "EUR", "payable_total": "10.00", "payable_total": "10000.00"}',
        "json_duplicate_key",
        "payable_total",
    )
    add(
        "json_deep_nesting",
        b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        "malformed_json",
        "nested too deeply",
    )
    text = json.dumps(invoice_json())
    for codec, label in (
        ("utf-16-le", "UTF-16LE"),
        ("utf-16-be", "UTF-16BE"),
        ("utf-32-le", "UTF-32LE"),
        ("utf-32-be", "UTF-32BE"),
    ):
        add(
            f"json_{codec.replace('-', '')}_without_bom",
            text.encode(codec),
            "bad_encoding",
            f"{label} without a byte-order mark",
        )
    add(
        "json_nul_escape",
        json.dumps(invoice_json(invoice_number="H\u00001")).encode(),
        "unstorable_character",
        "U+0000",
    )
    add(
        "json_lone_surrogate",
        b'{"invoice_number": "H-1", "seller_name": "A\\ud800B"}',
        "unstorable_character",
        "U+D800",
    )
    add("json_raw_nul_bytes", text.encode() + b"\x00" * 64, "malformed_json", "syntax error")
    add("json_invalid_utf8", b'{"invoice_number": "\xff\xfe\xfa"}', "bad_encoding", "UTF-8")
    add("json_top_level_array", b"[" + text.encode() + b"]", "json_schema", "top level")
    add(
        "json_19mb_string",
        json.dumps(invoice_json(seller_name="S" * (19 * 1000 * 1000))).encode(),
        "json_schema",
        "seller_name",
    )
    return tuple(items)


def by_name(seed: int = 0) -> dict[str, HostileInput]:
    return {item.name: item for item in build(seed)}
