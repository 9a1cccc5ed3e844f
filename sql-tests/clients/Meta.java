// pgjdbc's DatabaseMetaData against a Weir server: prints what the driver reports,
// one fact per line, for sql-tests/tests/catalog_tools.rs to check.
// Run: java -cp /usr/share/java/postgresql.jar Meta.java <port>
import java.sql.*;

public class Meta {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/weir";
        try (Connection c = DriverManager.getConnection(url, "weir", "")) {
            DatabaseMetaData m = c.getMetaData();
            System.out.println("product " + m.getDatabaseProductName() + " " + m.getDatabaseMajorVersion());
            try (ResultSet rs = m.getTables(null, "public", "%", null)) {
                while (rs.next()) {
                    System.out.println("table " + rs.getString("TABLE_NAME") + " " + rs.getString("TABLE_TYPE"));
                }
            }
            try (ResultSet rs = m.getColumns(null, "public", "%", "%")) {
                while (rs.next()) {
                    System.out.println("column " + rs.getString("TABLE_NAME") + "." + rs.getString("COLUMN_NAME")
                        + " " + rs.getString("TYPE_NAME") + " jdbc=" + rs.getInt("DATA_TYPE")
                        + " size=" + rs.getInt("COLUMN_SIZE") + " digits=" + rs.getInt("DECIMAL_DIGITS")
                        + " nullable=" + rs.getString("IS_NULLABLE") + " pos=" + rs.getInt("ORDINAL_POSITION"));
                }
            }
            try (ResultSet rs = m.getTables(null, "public", "%", null)) {
                while (rs.next()) {
                    String table = rs.getString("TABLE_NAME");
                    try (ResultSet pk = m.getPrimaryKeys(null, "public", table)) {
                        while (pk.next()) {
                            System.out.println("pk " + table + "." + pk.getString("COLUMN_NAME")
                                + " seq=" + pk.getInt("KEY_SEQ") + " name=" + pk.getString("PK_NAME"));
                        }
                    }
                    try (ResultSet ix = m.getIndexInfo(null, "public", table, false, false)) {
                        while (ix.next()) {
                            System.out.println("index " + table + "." + ix.getString("INDEX_NAME")
                                + " column=" + ix.getString("COLUMN_NAME") + " pos=" + ix.getInt("ORDINAL_POSITION")
                                + " unique=" + !ix.getBoolean("NON_UNIQUE"));
                        }
                    }
                }
            }
            try (ResultSet rs = m.getSchemas()) {
                while (rs.next()) {
                    System.out.println("schema " + rs.getString("TABLE_SCHEM"));
                }
            }
            try (ResultSet rs = m.getTypeInfo()) {
                while (rs.next()) {
                    System.out.println("type " + rs.getString("TYPE_NAME") + " jdbc=" + rs.getInt("DATA_TYPE"));
                }
            }
            System.out.println("done");
        }
    }
}
