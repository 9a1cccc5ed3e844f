// pgjdbc against Weir, run by the JDK's single-file launcher from
// sql-tests/tests/jdbc.rs:
//   java -cp /usr/share/java/postgresql.jar JdbcClient.java <port> <mode>
// Modes: "protocol" (prepared statements past prepareThreshold, batches, fetch size,
// binary transfer) and "tls" (sslmode=require). Prints one "key: value" line per
// check; the Rust test asserts on them. A failing call prints "error: ..." and exits 1.

import java.math.BigDecimal;
import java.sql.*;
import java.util.*;

public class JdbcClient {
    static String url(int port, String extra) {
        return "jdbc:postgresql://127.0.0.1:" + port + "/weir?user=weir" + extra;
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        try {
            if (args[1].equals("tls")) {
                tls(port);
            } else {
                protocol(port);
            }
        } catch (SQLException e) {
            System.out.println("error: " + e.getSQLState() + " " + e.getMessage());
            System.exit(1);
        }
    }

    static void tls(int port) throws SQLException {
        try (Connection c = DriverManager.getConnection(url(port, "&sslmode=require"))) {
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT 40 + 2")) {
                rs.next();
                System.out.println("tls-select: " + rs.getInt(1));
            }
        }
    }

    static void protocol(int port) throws SQLException {
        try (Connection c = DriverManager.getConnection(url(port, ""))) {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE items (id int, name text)");
                s.execute("CREATE TABLE big (x int)");
            }
            preparedReuse(c);
            batches(c);
            fetchSize(c);
        }
        // prepareThreshold=-1: server-prepared (and so binary results) from the start.
        try (Connection c = DriverManager.getConnection(url(port, "&prepareThreshold=-1"))) {
            binaryTypes(c);
        }
    }

    /** 20 executions of one INSERT and one parameterized SELECT (threshold is 5). */
    static void preparedReuse(Connection c) throws SQLException {
        List<Integer> counts = new ArrayList<>();
        try (PreparedStatement ins = c.prepareStatement("INSERT INTO items VALUES (?, ?)")) {
            for (int i = 0; i < 20; i++) {
                ins.setInt(1, i);
                ins.setString(2, "n" + i);
                counts.add(ins.executeUpdate());
            }
        }
        System.out.println("insert-counts: " + join(counts));
        try (Statement s = c.createStatement()) {
            s.execute("FLUSH");
        }
        List<String> names = new ArrayList<>();
        try (PreparedStatement sel = c.prepareStatement("SELECT name FROM items WHERE id = ?")) {
            for (int i = 0; i < 20; i++) {
                sel.setInt(1, i);
                try (ResultSet rs = sel.executeQuery()) {
                    names.add(rs.next() ? rs.getString(1) : "<none>");
                    if (rs.next()) {
                        names.add("<extra row>");
                    }
                }
            }
        }
        System.out.println("select-names: " + String.join(",", names));
        // One parameter each: the shape that failed with "A result was returned when
        // none was expected" from the 5th execution on (Describe answered an empty
        // RowDescription instead of NoData for the named statement).
        String[] dml = {
            "INSERT INTO items VALUES (?, 'one')",
            "UPDATE items SET name = 'two' WHERE id = ?",
            "DELETE FROM items WHERE id = ? + 1000"
        };
        List<Integer> dmlCounts = new ArrayList<>();
        for (String sql : dml) {
            try (PreparedStatement p = c.prepareStatement(sql)) {
                int total = 0;
                for (int i = 0; i < 10; i++) {
                    // As ORMs do: asking for the parameter metadata describes the
                    // (server-prepared) statement.
                    p.setInt(p.getParameterMetaData().getParameterCount(), 500 + i);
                    total += p.executeUpdate();
                }
                dmlCounts.add(total);
            }
        }
        System.out.println("single-parameter-dml: " + join(dmlCounts));
    }

    /** executeBatch reports each entry's own count. */
    static void batches(Connection c) throws SQLException {
        try (PreparedStatement ins = c.prepareStatement("INSERT INTO big VALUES (?)")) {
            for (int i = 1; i <= 1000; i++) {
                ins.setInt(1, i);
                ins.addBatch();
            }
            int[] counts = ins.executeBatch();
            long ones = Arrays.stream(counts).filter(n -> n == 1).count();
            System.out.println("batch-insert: entries=" + counts.length + " ones=" + ones);
        }
        try (Statement s = c.createStatement()) {
            s.execute("FLUSH");
        }
        try (PreparedStatement del = c.prepareStatement("DELETE FROM items WHERE id < ?")) {
            // Rows 0..19 exist: deleting below 3, then below 3 again, then below 10.
            for (int bound : new int[] {3, 3, 10}) {
                del.setInt(1, bound);
                del.addBatch();
            }
            System.out.println("batch-delete: " + join(del.executeBatch()));
        }
        try (Statement s = c.createStatement()) {
            s.addBatch("INSERT INTO items VALUES (100, 'a')");
            s.addBatch("INSERT INTO items SELECT id + 1000, name FROM items WHERE id >= 10 AND id < 20");
            System.out.println("batch-statements: " + join(s.executeBatch()));
        }
    }

    /** setFetchSize with autocommit off: rows arrive in portal-suspended chunks. */
    static void fetchSize(Connection c) throws SQLException {
        c.setAutoCommit(false);
        try (PreparedStatement q = c.prepareStatement("SELECT x FROM big ORDER BY x")) {
            q.setFetchSize(64);
            long rows = 0, sum = 0, last = 0;
            boolean ordered = true;
            try (ResultSet rs = q.executeQuery()) {
                while (rs.next()) {
                    long x = rs.getLong(1);
                    ordered &= x == last + 1;
                    last = x;
                    rows++;
                    sum += x;
                }
            }
            System.out.println("fetch: rows=" + rows + " sum=" + sum + " ordered=" + ordered);
        }
        c.commit();
        c.setAutoCommit(true);
    }

    /** Binary results and parameters of each type, checked against Java values. */
    static void binaryTypes(Connection c) throws SQLException {
        String sql = "SELECT CAST(? AS int), CAST(? AS bigint), CAST(? AS numeric), "
            + "CAST(? AS timestamp), CAST(? AS date), CAST(? AS boolean), CAST(? AS text), "
            + "CAST(? AS bytea), CAST(? AS double precision), CAST(? AS real), "
            + "CAST(? AS smallint)";
        try (PreparedStatement p = c.prepareStatement(sql)) {
            p.setInt(1, -42);
            p.setLong(2, 9_000_000_000L);
            p.setBigDecimal(3, new BigDecimal("12345.678"));
            p.setTimestamp(4, Timestamp.valueOf("2024-02-29 13:14:15.123456"));
            p.setDate(5, java.sql.Date.valueOf("2023-12-31"));
            p.setBoolean(6, true);
            p.setString(7, "héllo");
            p.setBytes(8, new byte[] {1, 2, (byte) 0xff});
            p.setDouble(9, 2.5);
            p.setFloat(10, 0.25f);
            p.setShort(11, (short) 7);
            for (int run = 0; run < 3; run++) {
                try (ResultSet rs = p.executeQuery()) {
                    rs.next();
                    System.out.println("binary-int: " + rs.getInt(1));
                    System.out.println("binary-bigint: " + rs.getLong(2));
                    System.out.println("binary-numeric: " + rs.getBigDecimal(3).stripTrailingZeros().toPlainString());
                    System.out.println("binary-timestamp: " + rs.getTimestamp(4));
                    System.out.println("binary-date: " + rs.getDate(5));
                    System.out.println("binary-bool: " + rs.getBoolean(6));
                    System.out.println("binary-text: " + rs.getString(7));
                    System.out.println("binary-bytea: " + Arrays.toString(rs.getBytes(8)));
                    System.out.println("binary-float8: " + rs.getDouble(9));
                    System.out.println("binary-float4: " + rs.getFloat(10));
                    System.out.println("binary-int2: " + rs.getShort(11));
                }
            }
        }
    }

    static String join(List<Integer> xs) {
        StringBuilder b = new StringBuilder();
        for (int x : xs) {
            if (b.length() > 0) b.append(',');
            b.append(x);
        }
        return b.toString();
    }

    static String join(int[] xs) {
        List<Integer> l = new ArrayList<>();
        for (int x : xs) l.add(x);
        return join(l);
    }
}
