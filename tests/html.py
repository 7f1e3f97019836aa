"""Reading a server-rendered form as a browser would submit it (stdlib only)."""

from html.parser import HTMLParser


class _FormReader(HTMLParser):
    def __init__(self, form_id: str):
        super().__init__(convert_charrefs=True)
        self.form_id = form_id
        self.inside = False
        self.values: dict[str, str] = {}
        self._textarea: str | None = None
        self._select: str | None = None
        self._first_option: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form" and attrs.get("id") == self.form_id:
            self.inside = True
        if not self.inside or "disabled" in attrs:
            return
        name = attrs.get("name")
        if tag == "input" and name:
            kind = attrs.get("type", "text")
            if kind in ("checkbox", "radio"):
                if "checked" in attrs:
                    self.values[name] = attrs.get("value", "on")
            elif kind not in ("submit", "button", "file"):
                self.values[name] = attrs.get("value", "")
        elif tag == "textarea" and name:
            self._textarea = name
            self.values[name] = ""
        elif tag == "select" and name:
            self._select, self._first_option = name, None
        elif tag == "option" and self._select:
            value = attrs.get("value", "")
            if self._first_option is None:
                self._first_option = value
            if "selected" in attrs:
                self.values[self._select] = value

    def handle_endtag(self, tag):
        if tag == "form" and self.inside:
            self.inside = False
        elif tag == "textarea":
            self._textarea = None
        elif tag == "select" and self._select:
            self.values.setdefault(self._select, self._first_option or "")
            self._select = None

    def handle_data(self, data):
        if self._textarea:
            # A browser drops the one newline that follows <textarea>.
            text = self.values[self._textarea] + data
            self.values[self._textarea] = text[1:] if text.startswith("\n") else text


def form_values(html: str, form_id: str) -> dict[str, str]:
    """The name → value pairs the form with this id would post, as rendered."""
    reader = _FormReader(form_id)
    reader.feed(html)
    return reader.values
