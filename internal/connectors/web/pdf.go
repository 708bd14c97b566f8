package web

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/ledongthuc/pdf"
)

// maxPDFText bounds the text read out of a PDF.
const maxPDFText = 4 << 20

// PDFText returns the text of a PDF document, as lines. A malformed
// document is an error, never a panic.
func PDFText(body []byte) (lines []string, err error) {
	defer func() {
		if p := recover(); p != nil { // the reader panics on some malformed files
			lines, err = nil, fmt.Errorf("malformed PDF: %v", p)
		}
	}()
	r, err := pdf.NewReader(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		return nil, fmt.Errorf("malformed PDF: %w", err)
	}
	var b strings.Builder
	for i := 1; i <= r.NumPage(); i++ {
		p := r.Page(i)
		if p.V.IsNull() {
			continue
		}
		// Content gives the text runs with their positions: a run on
		// another baseline starts a line, a gap on the same one a space.
		var lastY, lastEnd float64
		first := true
		for _, t := range p.Content().Text {
			switch {
			case first:
			case t.Y != lastY:
				b.WriteByte('\n')
			case t.X-lastEnd > t.FontSize*0.15:
				b.WriteByte(' ')
			}
			b.WriteString(t.S)
			lastY, lastEnd, first = t.Y, t.X+t.W, false
			if b.Len() > maxPDFText {
				return nil, fmt.Errorf("PDF text longer than %d bytes", maxPDFText)
			}
		}
		b.WriteByte('\n')
	}
	return strings.Split(b.String(), "\n"), nil
}
