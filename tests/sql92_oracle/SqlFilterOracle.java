// Ground truth for tests/test_sql92_oracle.py: Apache RocketMQ 5.3.3's own SQL92 filter
// (rocketmq-filter-5.3.3.jar from `make peers`) parses and evaluates each case read from stdin.
//
// One case a line: hex(expression) TAB hex(key)=hex(value),... ; one answer a line:
// PARSE_ERROR, ERROR (evaluation threw), TRUE, FALSE, NULL, or OTHER:<class>.
// The broker's ExpressionMessageFilter matches a message only when evaluate() returns Boolean.TRUE.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.filter.expression.BooleanExpression;
import org.apache.rocketmq.filter.expression.EvaluationContext;
import org.apache.rocketmq.filter.parser.SelectorParser;

public class SqlFilterOracle {
    static String unhex(String h) {
        byte[] out = new byte[h.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
        }
        return new String(out, StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            StringBuilder out = new StringBuilder();
            String[] parts = line.split("\t", -1);
            String expr = unhex(parts[0]);
            final Map<String, Object> props = new HashMap<>();
            if (parts.length > 1 && !parts[1].isEmpty()) {
                for (String kv : parts[1].split(",")) {
                    String[] p = kv.split("=", -1);
                    props.put(unhex(p[0]), unhex(p[1]));
                }
            }
            EvaluationContext ctx = new EvaluationContext() {
                public Object get(String name) { return props.get(name); }
                public Map<String, Object> keyValues() { return props; }
            };
            BooleanExpression e;
            try {
                e = SelectorParser.parse(expr);
            } catch (Throwable t) {
                out.append("PARSE_ERROR\n");
                emit(out);
                continue;
            }
            Object r;
            try {
                r = e.evaluate(ctx);
            } catch (Throwable t) {
                out.append("ERROR\n");
                emit(out);
                continue;
            }
            if (r == null) out.append("NULL\n");
            else if (r == Boolean.TRUE) out.append("TRUE\n");
            else if (r == Boolean.FALSE) out.append("FALSE\n");
            else if (r instanceof Boolean) out.append(((Boolean) r) ? "TRUE\n" : "FALSE\n");
            else out.append("OTHER:").append(r.getClass().getSimpleName()).append("\n");
            emit(out);
        }
    }

    // one answer per line, flushed: the test waits for it before sending the next case
    static void emit(StringBuilder out) {
        System.out.print(out);
        System.out.flush();
    }
}
