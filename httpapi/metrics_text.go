package httpapi

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
)

// contentTypeText is the media type of the Prometheus text exposition
// format, version 0.0.4, the only format GET /metrics writes.
const contentTypeText = "text/plain; version=0.0.4; charset=utf-8"

// Metric types, as a TYPE line spells them.
const (
	typeCounter   = "counter"
	typeGauge     = "gauge"
	typeHistogram = "histogram"
	typeSummary   = "summary"
)

// label is one name="value" pair of a series.
type label struct{ name, value string }

// point is a histogram bucket (upper bound, cumulative count) or a
// summary quantile (quantile, value).
type point struct{ at, v float64 }

// series is one labelled member of a family. Counters and gauges use
// value; histograms and summaries use points, count and sum.
type series struct {
	labels []label
	value  float64
	points []point
	count  uint64
	sum    float64
}

// family is one metric family: a name, its HELP and TYPE, and its series.
type family struct {
	name, help, typ string
	series          []series
}

// exposition collects the families of one scrape. It is not safe for
// concurrent use; each scrape builds its own.
type exposition struct{ fams []family }

// add appends a family. A family without series is left out, as
// client_golang leaves out a vector nothing was recorded in.
func (e *exposition) add(name, help, typ string, ss ...series) {
	if len(ss) == 0 {
		return
	}
	for i := range ss {
		slices.SortFunc(ss[i].labels, func(a, b label) int { return strings.Compare(a.name, b.name) })
	}
	e.fams = append(e.fams, family{name: name, help: help, typ: typ, series: ss})
}

// gauge adds an unlabelled gauge.
func (e *exposition) gauge(name, help string, v float64) {
	e.add(name, help, typeGauge, series{value: v})
}

// counter adds an unlabelled counter.
func (e *exposition) counter(name, help string, v float64) {
	e.add(name, help, typeCounter, series{value: v})
}

// appendText appends every family to b in the text format, families
// sorted by name and series by their label values, so that two scrapes of
// the same state are byte for byte the same.
func (e *exposition) appendText(b []byte) []byte {
	slices.SortFunc(e.fams, func(a, b family) int { return strings.Compare(a.name, b.name) })
	for _, f := range e.fams {
		slices.SortFunc(f.series, func(a, b series) int { return compareLabels(a.labels, b.labels) })
		b = append(b, "# HELP "...)
		b = append(b, f.name...)
		b = append(b, ' ')
		b = appendEscaped(b, f.help, false)
		b = append(b, "\n# TYPE "...)
		b = append(b, f.name...)
		b = append(b, ' ')
		b = append(b, f.typ...)
		b = append(b, '\n')
		for _, s := range f.series {
			switch f.typ {
			case typeHistogram:
				b = appendHistogram(b, f.name, s)
			case typeSummary:
				for _, p := range s.points {
					b = appendSample(b, f.name, "", s.labels, label{"quantile", formatFloat(p.at)}, p.v)
				}
				b = appendSample(b, f.name, "_sum", s.labels, label{}, s.sum)
				b = appendSample(b, f.name, "_count", s.labels, label{}, float64(s.count))
			default:
				b = appendSample(b, f.name, "", s.labels, label{}, s.value)
			}
		}
	}
	return b
}

// appendHistogram appends a histogram's cumulative buckets, ending with
// le="+Inf" (whose count is the total), then its sum and count.
func appendHistogram(b []byte, name string, s series) []byte {
	inf := false
	for _, p := range s.points {
		b = appendSample(b, name, "_bucket", s.labels, label{"le", formatFloat(p.at)}, p.v)
		inf = math.IsInf(p.at, +1)
	}
	if !inf {
		b = appendSample(b, name, "_bucket", s.labels, label{"le", "+Inf"}, float64(s.count))
	}
	b = appendSample(b, name, "_sum", s.labels, label{}, s.sum)
	return appendSample(b, name, "_count", s.labels, label{}, float64(s.count))
}

// appendSample appends one line: name+suffix, the labels and extra (if
// it has a name) in braces, and the value.
func appendSample(b []byte, name, suffix string, labels []label, extra label, v float64) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	if len(labels) > 0 || extra.name != "" {
		b = append(b, '{')
		for i, l := range labels {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, l)
		}
		if extra.name != "" {
			if len(labels) > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, extra)
		}
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = appendFloat(b, v)
	return append(b, '\n')
}

func appendLabel(b []byte, l label) []byte {
	b = append(b, l.name...)
	b = append(b, '=', '"')
	b = appendEscaped(b, l.value, true)
	return append(b, '"')
}

// appendEscaped appends s with backslash and newline escaped, and the
// double quote too in a label value (HELP text leaves it alone).
func appendEscaped(b []byte, s string, quote bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// maxExactInt is the largest magnitude below which every integer is a
// float64 and is written without an exponent.
const maxExactInt = 1 << 53

// appendFloat appends v as Prometheus writes it: +Inf, -Inf, NaN,
// integers (below 2^53) in plain digits, anything else in the shortest
// 'g' form.
func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case v == math.Trunc(v) && math.Abs(v) < maxExactInt:
		return strconv.AppendInt(b, int64(v), 10)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// formatFloat is appendFloat for a label value such as le or quantile.
func formatFloat(v float64) string { return string(appendFloat(nil, v)) }

// compareLabels orders two sorted label sets pair by pair, name then
// value; within a family the names agree, so the values decide.
func compareLabels(a, b []label) int {
	for i := range min(len(a), len(b)) {
		if c := cmp.Or(strings.Compare(a[i].name, b[i].name), strings.Compare(a[i].value, b[i].value)); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}
