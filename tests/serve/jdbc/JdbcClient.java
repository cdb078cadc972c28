// A JVM client of `calibsql serve` through pgjdbc (Debian's libpostgresql-jdbc-java), run by
// tests/serve/jdbc.rs: java JdbcClient PORT (password in CALIBSQL_PASSWORD) < queries.
// Each query on standard input (one per line) is run with a Statement and printed as CSV
// after a line "QUERY"; then the catalog (getTables, getColumns), a PreparedStatement run
// past pgjdbc's prepareThreshold (so later runs use server-side statements and binary
// results), and the type names of a model column.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.sql.*;
import java.util.Properties;

public class JdbcClient {
    static void printRows(ResultSet rs) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        StringBuilder header = new StringBuilder();
        for (int i = 1; i <= md.getColumnCount(); i++) {
            header.append(i > 1 ? "," : "").append(md.getColumnLabel(i));
        }
        System.out.println(header);
        while (rs.next()) {
            StringBuilder row = new StringBuilder();
            for (int i = 1; i <= md.getColumnCount(); i++) {
                String v = rs.getString(i);
                row.append(i > 1 ? "," : "").append(v == null ? "" : v);
            }
            System.out.println(row);
        }
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/calibsql?sslmode=disable";
        Properties props = new Properties();
        props.setProperty("user", "analyst");
        props.setProperty("password", System.getenv("CALIBSQL_PASSWORD"));
        try (Connection con = DriverManager.getConnection(url, props)) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            String sql;
            while ((sql = in.readLine()) != null) {
                if (sql.isBlank()) continue;
                System.out.println("QUERY");
                try (Statement st = con.createStatement(); ResultSet rs = st.executeQuery(sql)) {
                    printRows(rs);
                }
            }
            DatabaseMetaData meta = con.getMetaData();
            try (ResultSet rs = meta.getTables(null, "public", "%", new String[] {"TABLE"})) {
                while (rs.next()) System.out.println("TABLE " + rs.getString("TABLE_NAME"));
            }
            try (ResultSet rs = meta.getColumns(null, "public", "t", "%")) {
                while (rs.next()) {
                    System.out.println("COLUMN " + rs.getString("COLUMN_NAME") + " " + rs.getString("TYPE_NAME"));
                }
            }
            String prepared = "SELECT count(*) AS n, ece(p_model, click) AS ece FROM t WHERE ad_type = ? AND p_model > ?";
            try (PreparedStatement ps = con.prepareStatement(prepared)) {
                for (int run = 0; run < 8; run++) {
                    ps.setString(1, run % 2 == 0 ? "banner" : "video");
                    ps.setDouble(2, 0.01);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        System.out.println("PREPARED " + run + " " + rs.getLong("n") + " " + rs.getDouble("ece"));
                    }
                }
            }
            try (Statement st = con.createStatement();
                 ResultSet rs = st.executeQuery("SELECT fit_platt(p_model, click) AS model, ece(p_model, click) AS ece FROM t")) {
                ResultSetMetaData md = rs.getMetaData();
                rs.next();
                System.out.println("TYPES " + md.getColumnTypeName(1) + " " + md.getColumnTypeName(2));
                System.out.println("MODEL " + rs.getString(1));
            }
        }
    }
}
