"""DRF renderers for the report files: CSV, FOCUS CSV and Excel, chosen with ?format=."""

import json

from rest_framework.renderers import BaseRenderer

from billing.exports import XLSX_TYPE


class _FileRenderer(BaseRenderer):
    """Passes prepared text or bytes through; anything else (an error) is written as JSON."""

    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, bytes | str):
            return data
        return json.dumps(data)


class CsvRenderer(_FileRenderer):
    media_type = "text/csv"
    format = "csv"


class FocusCsvRenderer(_FileRenderer):
    media_type = "text/csv"
    format = "focus"


class XlsxRenderer(_FileRenderer):
    media_type = XLSX_TYPE
    format = "xlsx"
    charset = None
    render_style = "binary"
