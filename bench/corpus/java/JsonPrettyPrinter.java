package com.example.json;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Parses JSON text into plain Java values (Map, List, String, Double, Long,
 * Boolean, null) and prints them back with indentation. Meant for config
 * files and debugging output, not for streaming very large documents.
 */
public final class JsonPrettyPrinter {

    /** Thrown for malformed input; the message includes the character offset. */
    public static final class JsonException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        public JsonException(String message, int position) {
            super(message + " at position " + position);
        }
    }

    private final String text;
    private int pos;

    private JsonPrettyPrinter(String text) {
        this.text = text;
    }

    /** Parse a complete JSON document. */
    public static Object parse(String text) {
        JsonPrettyPrinter parser = new JsonPrettyPrinter(text);
        Object value = parser.readValue();
        parser.skipWhitespace();
        if (parser.pos != text.length()) {
            throw new JsonException("unexpected trailing characters", parser.pos);
        }
        return value;
    }

    private void skipWhitespace() {
        while (pos < text.length() && Character.isWhitespace(text.charAt(pos))) {
            pos++;
        }
    }

    private char peek() {
        if (pos >= text.length()) {
            throw new JsonException("unexpected end of input", pos);
        }
        return text.charAt(pos);
    }

    private void expect(char expected) {
        char actual = peek();
        if (actual != expected) {
            throw new JsonException("expected '" + expected + "' but found '" + actual + "'", pos);
        }
        pos++;
    }

    private Object readValue() {
        skipWhitespace();
        char c = peek();
        return switch (c) {
            case '{' -> readObject();
            case '[' -> readArray();
            case '"' -> readString();
            case 't' -> readLiteral("true", Boolean.TRUE);
            case 'f' -> readLiteral("false", Boolean.FALSE);
            case 'n' -> readLiteral("null", null);
            default -> {
                if (c == '-' || Character.isDigit(c)) {
                    yield readNumber();
                }
                throw new JsonException("unexpected character '" + c + "'", pos);
            }
        };
    }

    private Map<String, Object> readObject() {
        Map<String, Object> result = new LinkedHashMap<>();
        expect('{');
        skipWhitespace();
        if (peek() == '}') {
            pos++;
            return result;
        }
        while (true) {
            skipWhitespace();
            int keyStart = pos;
            String key = readString();
            if (result.containsKey(key)) {
                throw new JsonException("duplicate key \"" + key + "\"", keyStart);
            }
            skipWhitespace();
            expect(':');
            result.put(key, readValue());
            skipWhitespace();
            if (peek() != ',') {
                expect('}');
                return result;
            }
            pos++;
        }
    }

    private List<Object> readArray() {
        List<Object> result = new ArrayList<>();
        expect('[');
        skipWhitespace();
        if (peek() == ']') {
            pos++;
            return result;
        }
        while (true) {
            result.add(readValue());
            skipWhitespace();
            if (peek() != ',') {
                expect(']');
                return result;
            }
            pos++;
        }
    }

    private String readString() {
        expect('"');
        StringBuilder sb = new StringBuilder();
        while (true) {
            char c = peek();
            pos++;
            if (c == '"') {
                return sb.toString();
            }
            if (c != '\\') {
                sb.append(c);
                continue;
            }
            char esc = peek();
            pos++;
            switch (esc) {
                case 'n' -> sb.append('\n');
                case 't' -> sb.append('\t');
                case 'r' -> sb.append('\r');
                case '"', '\\', '/' -> sb.append(esc);
                case 'u' -> {
                    sb.append(readHexChar());
                    pos += 4;
                }
                default -> throw new JsonException("invalid escape '\\" + esc + "'", pos - 1);
            }
        }
    }

    private char readHexChar() {
        if (pos + 4 > text.length()) {
            throw new JsonException("truncated unicode escape", pos);
        }
        try {
            return (char) Integer.parseInt(text.substring(pos, pos + 4), 16);
        } catch (NumberFormatException e) {
            throw new JsonException("invalid unicode escape", pos);
        }
    }

    private Object readLiteral(String word, Object value) {
        if (!text.startsWith(word, pos)) {
            throw new JsonException("expected " + word, pos);
        }
        pos += word.length();
        return value;
    }

    private Object readNumber() {
        int start = pos;
        if (peek() == '-') {
            pos++;
        }
        while (pos < text.length() && "0123456789.eE+-".indexOf(text.charAt(pos)) >= 0) {
            pos++;
        }
        String number = text.substring(start, pos);
        try {
            if (number.contains(".") || number.contains("e") || number.contains("E")) {
                return Double.parseDouble(number);
            }
            return Long.parseLong(number);
        } catch (NumberFormatException e) {
            throw new JsonException("invalid number '" + number + "'", start);
        }
    }

    /** Render a value with the given indentation width. */
    public static String format(Object value, int indent) {
        StringBuilder out = new StringBuilder();
        write(out, value, indent, 0);
        return out.toString();
    }

    private static void write(StringBuilder out, Object value, int indent, int depth) {
        if (value instanceof Map<?, ?> map) {
            if (map.isEmpty()) {
                out.append("{}");
                return;
            }
            out.append("{\n");
            int i = 0;
            for (Map.Entry<?, ?> entry : map.entrySet()) {
                out.append(" ".repeat(indent * (depth + 1)));
                writeString(out, String.valueOf(entry.getKey()));
                out.append(": ");
                write(out, entry.getValue(), indent, depth + 1);
                out.append(++i < map.size() ? ",\n" : "\n");
            }
            out.append(" ".repeat(indent * depth)).append('}');
        } else if (value instanceof List<?> list) {
            if (list.isEmpty()) {
                out.append("[]");
                return;
            }
            out.append("[\n");
            for (int i = 0; i < list.size(); i++) {
                out.append(" ".repeat(indent * (depth + 1)));
                write(out, list.get(i), indent, depth + 1);
                out.append(i + 1 < list.size() ? ",\n" : "\n");
            }
            out.append(" ".repeat(indent * depth)).append(']');
        } else if (value instanceof String s) {
            writeString(out, s);
        } else {
            out.append(value);
        }
    }

    private static void writeString(StringBuilder out, String s) {
        out.append('"');
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\t' -> out.append("\\t");
                default -> out.append(c < 0x20 ? String.format("\\u%04x", (int) c) : String.valueOf(c));
            }
        }
        out.append('"');
    }
}
